"""The launch plan with `rollout_transport.type = "tcp"`: the orchestrator's rollout port is in the plan and in the
pre-flight port check (a taken one is refused naming the field), and a multi-node run points the trainer at the
orchestrator node's address while the orchestrator binds its own."""

from __future__ import annotations

import socket

import pytest
from tests.launcher.test_launch_plan import cfg_of, demo_args, free_block, rows_at, tiny  # noqa: F401 (fixture)

from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.layout import Layout
from prime_rl.launcher.plan import resolve
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
