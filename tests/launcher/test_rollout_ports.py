"""The launch plan with `rollout_transport.type = "tcp"`: the orchestrator's rollout port is in the plan and in the
pre-flight port check (a taken one is refused naming the field), and a multi-node run points the trainer at the
orchestrator node's address while the orchestrator binds its own, on a port of its node's `port_base` block; an
orchestrator bound beyond loopback without a token gets a random one, shared with the trainer."""

from __future__ import annotations

import socket

import pytest
from tests.launcher.test_launch_plan import cfg_of, demo_args, free_block, rows_at, tiny  # noqa: F401 (fixture)

from prime_rl.config.deployment import PORT_STRIDE
from prime_rl.config.loader import ConfigError
from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.layout import Layout
from prime_rl.launcher.placement import place
from prime_rl.launcher.plan import resolve, rollout_token
from prime_rl.launcher.specs import node_specs
from prime_rl.ports import free_port


def test_single_node_plan_lists_the_rollout_port_and_refuses_a_taken_one(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    port = free_port()
    cfg = cfg_of(demo_args(tmp_path, tiny, None, None, "--rollout-transport.type", "tcp",
                           "--rollout-transport.port", str(port)))  # fmt: skip
    plan = resolve(cfg, Layout.single(), probe=lambda url: False, gpus=[])
    assert plan.process("orchestrator").ports == [port]
    assert plan.config.trainer.rollout_transport.endpoint == f"tcp://127.0.0.1:{port}"
    fs = resolve(cfg_of(demo_args(tmp_path, tiny)), Layout.single(), probe=lambda url: False, gpus=[])
    assert fs.process("orchestrator").ports == []  # the filesystem transport binds nothing
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(PreflightError, match=f"port {port} \\(rollout_transport.port"):
            resolve(cfg, Layout.single(), probe=lambda url: False, gpus=[])


def test_multi_node_trainer_connects_to_the_orchestrator_node(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny, None, None, "--rollout-transport.type", "tcp")
    i = args.index("--inference.server.port")
    del args[i : i + 2]
    cfg = cfg_of(args + ["--deployment.type", "multi-node", "--deployment.num-infer-nodes", "1",
                         "--deployment.num-train-nodes", "1", "--deployment.port-base", str(free_block())])  # fmt: skip
    plan = resolve(cfg, Layout.slurm("multi-node", ["127.0.0.3", "127.0.0.2"], 0, "7"), probe=lambda u: False, gpus=[])
    assert plan.process("orchestrator").nodes == [0] and plan.process("trainer").nodes == [1]
    assert plan.config.orchestrator.rollout_transport.host == "127.0.0.3"
    assert plan.config.trainer.rollout_transport.host == "127.0.0.3"  # node 0's address, not the trainer's own
    bound = resolve(cfg.model_copy(update={"deployment": cfg.deployment.model_copy(update={"bind_host": "0.0.0.0"})}),
                    Layout.slurm("multi-node", ["127.0.0.3", "127.0.0.2"], 0, "7"), probe=lambda u: False, gpus=[])
    assert bound.config.orchestrator.rollout_transport.host == "0.0.0.0"
    assert bound.config.trainer.rollout_transport.host == "127.0.0.3"
    # bound beyond loopback without a token: trainer and orchestrator get one random token (loopback: none)
    token = bound.config.orchestrator.rollout_transport.token
    assert token and len(token) >= 24 and bound.config.trainer.rollout_transport.token == token
    assert plan.config.orchestrator.rollout_transport.token is None


def test_rollout_token_only_beyond_loopback_and_when_none_is_configured():
    wide = RLConfig(rollout_transport={"type": "tcp", "host": "0.0.0.0"})
    changes = rollout_token(wide, environ={})
    assert set(changes) == {"orchestrator.rollout_transport.token", "trainer.rollout_transport.token"}
    assert len(set(changes.values())) == 1 and rollout_token(wide, environ={}) != changes  # random each time
    assert rollout_token(wide, environ={"PRIME_RL_ROLLOUT_TOKEN": "mine"}) == {}
    assert rollout_token(RLConfig(rollout_transport={"type": "tcp", "host": "0.0.0.0", "token": "t"}), environ={}) == {}
    assert rollout_token(RLConfig(rollout_transport={"type": "tcp"}), environ={}) == {}  # 127.0.0.1
    assert rollout_token(RLConfig(rollout_transport={"host": "0.0.0.0"}), environ={}) == {}  # filesystem


def _multi(tmp_path, tiny, port_base: int, *extra: str):  # noqa: F811
    args = demo_args(tmp_path, tiny, None, None, "--rollout-transport.type", "tcp")
    i = args.index("--inference.server.port")
    del args[i : i + 2]
    return cfg_of(args + ["--deployment.type", "multi-node", "--deployment.num-infer-nodes", "1",
                          "--deployment.num-train-nodes", "1", "--deployment.port-base", str(port_base), *extra])  # fmt: skip


def test_multi_node_rollout_port_is_in_the_orchestrator_nodes_port_base_block(tmp_path, tiny):  # noqa: F811
    """The tcp rollout port is `port_base + 16k + 15` (k: the orchestrator's node), so two runs with different
    port_base (on hosts they share) never want the same port, and within a run it differs from every other port."""
    rows_at(tmp_path / "gym-root")
    addrs = ["127.0.0.3", "127.0.0.2"]
    base_a, base_b = free_block(2 * PORT_STRIDE), free_block(2 * PORT_STRIDE)
    a = resolve(_multi(tmp_path, tiny, base_a), Layout.slurm("multi-node", addrs, 0, "7"), probe=lambda u: False, gpus=[])
    assert a.process("orchestrator").ports == [base_a + 15]
    for section in (a.config.orchestrator, a.config.trainer):
        assert section.rollout_transport.port == base_a + 15
    ports = [p for proc in a.processes for p in proc.ports] + [base_a + PORT_STRIDE]  # + the torchrun rendezvous (node 1)
    assert len(ports) == len(set(ports)) and all(base_a <= p < base_a + 2 * PORT_STRIDE for p in ports)
    b = resolve(_multi(tmp_path, tiny, base_b), Layout.slurm("multi-node", addrs, 0, "8"), probe=lambda u: False, gpus=[])
    assert b.process("orchestrator").ports == [base_b + 15] != a.process("orchestrator").ports
    # the orchestrator on node 1 (the trainer node): that node's block
    c = resolve(_multi(tmp_path, tiny, base_a, "--deployment.orchestrator-node", "1"),
                Layout.slurm("multi-node", addrs, 0, "9"), probe=lambda u: False, gpus=[])  # fmt: skip
    assert c.config.trainer.rollout_transport.port == base_a + PORT_STRIDE + 15
    assert c.config.trainer.rollout_transport.host == "127.0.0.2"


def test_multi_node_orchestrator_node_checks_its_rollout_port_free(tmp_path, tiny):  # noqa: F811
    """The orchestrator's node checks the derived port before starting its children, naming port_base."""
    rows_at(tmp_path / "gym-root")
    base = free_block(2 * PORT_STRIDE)
    cfg = _multi(tmp_path, tiny, base)
    plan = resolve(cfg, Layout.slurm("multi-node", ["127.0.0.1", "127.0.0.1"], 0, "7"), probe=lambda u: False, gpus=[])
    with socket.socket() as s:
        s.bind(("127.0.0.1", base + 15))
        s.listen()
        with pytest.raises(PreflightError, match=f"port {base + 15} \\(the orchestrator's tcp rollout port \\(deployment.port_base"):
            node_specs(cfg, plan, 0, place(cfg, [], roles={"inference", "orchestrator", "env-server"}))


def test_multi_node_refuses_an_explicit_rollout_port(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    with pytest.raises(ConfigError, match=r"rollout_transport.port = 31999 is not used by a multi-node run.*port_base"):
        _multi(tmp_path, tiny, free_block(), "--rollout-transport.port", "31999")
