"""The launch plan of a multi-node run with `weight_transport.type = "collective"`: trainer rank 0 hosts the weight
group's store on the first trainer node (its address, a port of its `port_base` block), the orchestrator hands that
address to the inference workers, the port is in the plan and in the trainer node's port check; and what
`deployment.shared_fs = false` refuses (every combination that would still need another node's directory)."""

from __future__ import annotations

import socket

import pytest
from tests.launcher.test_launch_plan import cfg_of, demo_args, free_block, rows_at, tiny  # noqa: F401 (fixture)

from prime_rl.config.deployment import PORT_STRIDE, PORT_WEIGHTS, DeploymentConfig
from prime_rl.config.loader import ConfigError
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.layout import Layout
from prime_rl.launcher.placement import place
from prime_rl.launcher.plan import resolve
from prime_rl.launcher.specs import node_specs

ADDRS = ["127.0.0.3", "127.0.0.2"]


def _multi(tmp_path, tiny, port_base: int, *extra: str):  # noqa: F811
    args = demo_args(tmp_path, tiny, None, None, "--rollout-transport.type", "tcp", "--weight-transport.type", "collective")
    i = args.index("--inference.server.port")
    del args[i : i + 2]
    return cfg_of(args + ["--deployment.type", "multi-node", "--deployment.num-infer-nodes", "1",
                          "--deployment.num-train-nodes", "1", "--deployment.cpu-train-procs", "2",
                          "--deployment.port-base", str(port_base), *extra])  # fmt: skip


def test_the_weight_group_lives_on_the_first_trainer_node(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    base = free_block(2 * PORT_STRIDE)
    plan = resolve(_multi(tmp_path, tiny, base), Layout.slurm("multi-node", ADDRS, 0, "7"), probe=lambda u: False, gpus=[])
    trainer_wt, orch_wt = plan.config.trainer.weight_transport, plan.config.orchestrator.weight_transport
    port = base + PORT_STRIDE * 1 + PORT_WEIGHTS  # node 1: the first trainer node (node 0 runs inference)
    assert trainer_wt.address == orch_wt.address == f"tcp://127.0.0.2:{port}"
    assert trainer_wt.inference_workers == orch_wt.inference_workers == 1  # one replica on one inference node
    assert plan.process("trainer").ports == [port]
    # every port of the run is distinct and inside the run's blocks (+ the c10d rendezvous on node 1)
    ports = [p for proc in plan.processes for p in proc.ports] + [base + PORT_STRIDE]
    assert len(ports) == len(set(ports)) and all(base <= p < base + 2 * PORT_STRIDE for p in ports)
    # bound to the wildcard: the trainer binds it, the inference workers still connect to the node's address
    bound = resolve(_multi(tmp_path, tiny, base, "--deployment.bind-host", "0.0.0.0"),
                    Layout.slurm("multi-node", ADDRS, 0, "7"), probe=lambda u: False, gpus=[])  # fmt: skip
    assert bound.config.trainer.weight_transport.host == "0.0.0.0"
    assert bound.config.orchestrator.weight_transport.host == "127.0.0.2"
    fs = resolve(_multi(tmp_path, tiny, base, "--weight-transport.type", "filesystem"),
                 Layout.slurm("multi-node", ADDRS, 0, "7"), probe=lambda u: False, gpus=[])  # fmt: skip
    assert fs.process("trainer").ports == [] and fs.config.trainer.weight_transport.host == "127.0.0.1"


def test_more_than_one_trainer_node_is_refused(tmp_path, tiny):  # noqa: F811
    """torchrun's c10d rendezvous gives rank 0 (the weight group's host) to whichever trainer node's address sorts
    first, so the launcher could not name it to the inference nodes."""
    rows_at(tmp_path / "gym-root")
    with pytest.raises(ConfigError, match=r"collective' with deployment.num_train_nodes = 2: not supported.*one trainer node"):
        _multi(tmp_path, tiny, free_block(3 * PORT_STRIDE), "--deployment.num-train-nodes", "2")


def test_the_trainer_node_checks_the_weight_port_free(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    base = free_block(2 * PORT_STRIDE)
    cfg = _multi(tmp_path, tiny, base)
    addrs = ["127.0.0.1"] * 2
    plan = resolve(cfg, Layout.slurm("multi-node", addrs, 1, "7"), probe=lambda u: False, gpus=[])
    port = base + PORT_STRIDE + PORT_WEIGHTS
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(PreflightError, match=f"port {port} \\(trainer rank 0's weight group store"):
            node_specs(cfg, plan, 1, place(cfg, [], roles={"trainer"}))


def test_node_dirs():
    shared = DeploymentConfig(type="multi-node")
    local = DeploymentConfig(type="multi-node", shared_fs=False)
    assert shared.node_dir("/r", 2).as_posix() == "/r"
    assert local.node_dir("/r", 2).as_posix() == "/r/node_2"
    assert local.control_port() == local.port_base  # node 0's rendezvous slot (the rendezvous is on a trainer node)
    assert local.weight_port() == local.port_base + PORT_STRIDE + PORT_WEIGHTS


@pytest.mark.parametrize(("extra", "message"), [
    (["--weight-transport.type", "filesystem"], r"deployment.shared_fs = false.*needs weight_transport.type = 'collective'"),
    (["--rollout-transport.type", "filesystem"], r"deployment.shared_fs = false.*needs rollout_transport.type = 'tcp'"),
    (["--trainer.model.lora.rank", "4"], r"weight_transport.type = 'collective' with trainer.model.lora"),
    (["--resume"], r"deployment.shared_fs = false.*with resume"),
])  # fmt: skip
def test_no_shared_fs_refuses_what_needs_another_nodes_directory(tmp_path, tiny, extra, message):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    with pytest.raises(ConfigError, match=message):
        _multi(tmp_path, tiny, free_block(2 * PORT_STRIDE), "--deployment.shared-fs", "false", *extra)


def test_no_shared_fs_is_multi_node_only():
    with pytest.raises(ValueError, match="deployment.shared_fs applies to multi-node runs only"):
        DeploymentConfig(shared_fs=False)


def test_no_shared_fs_refuses_rows_written_on_another_node(tmp_path, tiny):  # noqa: F811
    """node 0 writes missing rows on its own disk: an env server on another node could not read them."""
    base = free_block(2 * PORT_STRIDE)
    missing = tmp_path / "gym-root"  # no rows there: the plan writes them first
    cfg = _multi(tmp_path, tiny, base, "--deployment.shared-fs", "false", "--deployment.env-server-node", "1")
    with pytest.raises(PreflightError, match=r"deployment.shared_fs = false: node 0 writes the missing env-server rows"):
        resolve(cfg, Layout.slurm("multi-node", ADDRS, 0, "7"), probe=lambda u: False, gpus=[])
    rows_at(missing)  # rows present: the env server's node reads its own copy
    plan = resolve(cfg, Layout.slurm("multi-node", ADDRS, 0, "7"), probe=lambda u: False, gpus=[])
    assert plan.process("env-server").nodes == [1]
