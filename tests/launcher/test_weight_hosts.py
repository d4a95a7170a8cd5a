"""The launch plan of a multi-node run with `weight_transport.type = "collective"`: trainer rank 0 hosts the weight
group's store on the first trainer node (its address, a port of its `port_base` block), the orchestrator hands that
address to the inference workers, the port is in the plan and in the trainer node's port check; with two trainer
nodes torchrun puts trainer rank 0 on the first (run for real); and what `deployment.shared_fs = false` refuses
(every combination that would still need another node's directory)."""

from __future__ import annotations

import os
import socket
import subprocess

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
    # every port of the run is distinct and inside the run's blocks (+ the torchrun rendezvous on node 1)
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


# node 0 inference, nodes 1 and 2 the trainer; node 2's address sorts first (torchrun's c10d rendezvous would give
# it rank 0)
ADDRS3 = ["127.0.0.4", "127.0.0.3", "127.0.0.2"]


def _two_trainer_nodes(tmp_path, tiny, base: int):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    cfg = _multi(tmp_path, tiny, base, "--deployment.num-train-nodes", "2", "--deployment.cpu-train-procs", "1")
    return cfg, resolve(cfg, Layout.slurm("multi-node", ADDRS3, 0, "7"), probe=lambda u: False, gpus=[])


def _trainer_argv(cfg, plan, index: int) -> tuple[list[str], dict[str, str]]:
    """Node `index`'s torchrun argv up to the trainer module, and its environment additions."""
    spec = node_specs(cfg, plan, index, place(cfg, [], roles={"trainer"})).specs["trainer"]
    return spec.argv[: spec.argv.index("prime_rl.cli.trainer") - 1], spec.env


def test_two_trainer_nodes_pin_trainer_rank_zero_to_the_first_trainer_node(tmp_path, tiny):  # noqa: F811
    """With several trainer nodes the weight group's store stays on the first trainer node, and each trainer node's
    torchrun takes its position among the trainer nodes as its node rank (static rendezvous there)."""
    base = free_block(3 * PORT_STRIDE)
    cfg, plan = _two_trainer_nodes(tmp_path, tiny, base)
    port = base + PORT_STRIDE + PORT_WEIGHTS
    assert plan.config.orchestrator.weight_transport.address == f"tcp://127.0.0.3:{port}"
    assert plan.config.trainer.weight_transport.address == f"tcp://127.0.0.3:{port}"
    for index, rank in ((1, 0), (2, 1)):
        argv, _ = _trainer_argv(cfg, plan, index)
        opts = dict(zip(argv[3::2], argv[4::2], strict=True))
        assert opts["--rdzv-backend"] == "static" and opts["--node-rank"] == str(rank), argv
        assert (opts["--master-addr"], opts["--master-port"]) == ("127.0.0.3", str(base + PORT_STRIDE)), argv
        assert opts["--nnodes"] == "2" and opts["--nproc-per-node"] == "1", argv


def test_torchrun_puts_trainer_rank_zero_on_the_first_trainer_node(tmp_path, tiny):  # noqa: F811
    """The two trainer nodes' torchrun commands, run for real (the second node, whose address sorts first, started
    first): global rank 0 is the first trainer node's process, where the plan put the weight group's store."""
    base = free_block(3 * PORT_STRIDE)
    cfg, plan = _two_trainer_nodes(tmp_path, tiny, base)
    worker = tmp_path / "worker.py"
    worker.write_text("import os, pathlib\n"
                      "pathlib.Path(os.environ['OUT']).write_text(os.environ['RANK'] + ' ' + os.environ['WORLD_SIZE'])\n")
    procs = []
    try:
        for index in (2, 1):
            argv, env = _trainer_argv(cfg, plan, index)
            env = {**os.environ, **env, "OUT": str(tmp_path / f"node{index}"), "OMP_NUM_THREADS": "1"}
            procs.append(subprocess.Popen([*argv, str(worker)], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))  # fmt: skip
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert (tmp_path / "node1").read_text() == "0 2" and (tmp_path / "node2").read_text() == "1 2"


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
    (["--deployment.num-train-nodes", "2", "--deployment.cpu-train-procs", "1", "--ckpt.interval", "1"],
     r"deployment.shared_fs = false.*with 2 trainer nodes and ckpt.interval = 1: .*leave ckpt.interval unset"),
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
