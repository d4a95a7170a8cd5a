"""`rl` on the real 3-node Slurm cluster (scripts/local-slurm.sh) without a shared filesystem
(`deployment.shared_fs = false`), in two layouts of one data-parallel world of 2 trainer ranks: 1 inference node
(replica, orchestrator) + 1 trainer node with 2 ranks, and 1 inference node + 2 trainer nodes with 1 rank each.
Policy versions travel over the weight group across nodes (gloo), batches over tcp, each node keeps its own run
directory `run/node_<k>`.

Each job ends COMPLETED; the node directories are distinct and no node holds what only another node's processes
write (the inference node: no weights/ files, no batch files, no trainer log; the trainer nodes: no rollouts/
files, no orchestrator or inference log; only the first trainer node, where trainer rank 0 runs, has the versions'
markers), the shared `run/` holds only what the submitting host wrote (configs/, slurm/); trainer rank 0 runs on
the first trainer node and every policy version reached the inference server over the weight group there, as the
orchestrator's log says; and the trainer's loss, grad norm and entropy per step equal a single-node run of the same
config (2 trainer processes, the filesystem transports; run once for both layouts).

About 4 minutes in all on 2 cores (each run's time is mostly vLLM's start-up).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from tests.slurm.conftest import BIN, job_env, submit, tail, wait_job, wait_no_leftovers
from tests.slurm.test_slurm_rl import free_block

from prime_rl.config.deployment import PORT_STRIDE, PORT_WEIGHTS
from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

STEPS = 3


def common(run: Path, model: Path) -> str:
    return f"""
output_dir = "{run}"
max_steps = {STEPS}
seq_len = 256
startup_timeout_s = 900
stop_grace_s = 5
[model]
name = "{model}"
[orchestrator]
batch_size = 8
max_async_level = 0
seed = 7
[orchestrator.concurrency]
max_inflight = 8
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 12
seed = 7
[[orchestrator.train.source]]
name = "fast"
env.id = "tests.integration.fast_env:FastEnv"
[trainer]
threads = 1
seed = 7
[trainer.optim]
lr = 0.05
"""


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


@pytest.fixture(scope="module")
def single_node_run(tmp_path_factory):
    """`get(env, model)`: the trainer's metrics rows by step of the run on one node (2 trainer processes, files for
    weights and batches), run at the first call only."""
    cache: dict[int, dict] = {}

    def get(env: dict[str, str], model: Path) -> dict[int, dict]:
        if not cache:
            tmp = tmp_path_factory.mktemp("single")
            ref_dir, ref_cfg, port = tmp / "run", tmp / "single.toml", free_port()
            ref_cfg.write_text(common(ref_dir, model).replace(
                "[orchestrator]\n", f'[orchestrator]\nclient.base_url = ["http://127.0.0.1:{port}"]\n') + f"""
[deployment]
cpu_train_procs = 2
[inference.server]
port = {port}
""")
            r = subprocess.run([str(BIN / "rl"), "@", str(ref_cfg)], capture_output=True, text=True, timeout=1800,
                               env=env)  # fmt: skip
            assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
            cache.update({row["step"]: row for row in read_metrics(ref_dir, "trainer")})
        return cache

    return get


@pytest.mark.parametrize(("train_nodes", "procs"), [(1, 2), (2, 1)], ids=["1-trainer-node", "2-trainer-nodes"])
def test_no_shared_filesystem_run_matches_the_single_node_run(slurm_cluster, single_node_run, tmp_path, train_nodes,
                                                              procs):  # fmt: skip
    env = job_env(slurm_cluster)
    model = cached_tiny_model(hidden=64, layers=2)
    run = tmp_path / "run"
    cfg = tmp_path / "rl.toml"
    base = free_block((1 + train_nodes) * PORT_STRIDE)
    cfg.write_text(common(run, model) + f"""
[deployment]
type = "multi-node"
num_infer_nodes = 1
num_train_nodes = {train_nodes}
cpu_train_procs = {procs}
port_base = {base}
shared_fs = false
[weight_transport]
type = "collective"
timeout_s = 600
[rollout_transport]
type = "tcp"
[slurm]
job_name = "prime-rl-test"
partition = "debug"
time = "00:20:00"
""")
    job, _ = submit([str(BIN / "rl"), "@", str(cfg)], env)
    job_log = run / "slurm" / f"job_{job}.log"
    state = wait_job(job, env, job_log)
    nodes = [run / f"node_{k}" for k in range(1 + train_nodes)]
    assert state == ("COMPLETED", "0:0"), tail(job_log) + "".join(
        tail(p) for n in nodes for p in sorted((n / "logs").glob("*.log")))
    assert wait_no_leftovers(str(tmp_path)) == []

    # each node wrote only into its own directory, and only what its own processes make
    assert len({n.resolve() for n in nodes}) == len(nodes) and all(n.is_dir() for n in nodes)
    assert sorted(p.name for p in run.iterdir()) == ["configs", *(n.name for n in nodes), "slurm"]
    assert [p.name for p in files_under(run / "slurm") if p.suffix == ".json"] == []  # no job directory markers
    infer, trainers = nodes[0], nodes[1:]
    assert files_under(infer / "weights") == []
    # the orchestrator's own record of each step's rollouts (rollouts/step_N/traces.jsonl) stays on its node; no
    # batch file (rank_R.bin) is written anywhere, and the trainer nodes have no rollouts/ at all
    assert {p.name for p in files_under(infer / "rollouts")} == {"traces.jsonl"}
    assert [p for n in nodes for p in files_under(n) if p.suffix == ".bin"] == []
    for node in trainers:
        assert files_under(node / "rollouts") == []
        assert not (node / "logs/orchestrator.log").exists() and not list((node / "logs").glob("vllm*"))
    assert not (infer / "logs/trainer.log").exists() and (infer / "logs/orchestrator.log").is_file()
    # trainer rank 0 (metrics, the versions' markers) runs on the first trainer node: Slurm's node2
    ranks = {}
    for node in trainers:
        ranks.update(re.findall(r"trainer rank (\d)/2 on cpu, node (\S+),", (node / "logs/trainer.log").read_text()))
    assert ranks == ({"0": "node2", "1": "node2"} if train_nodes == 1 else {"0": "node2", "1": "node3"})
    first = trainers[0]
    assert files_under(first / f"weights/step_{STEPS}")  # transport.json + STABLE, on rank 0's node only
    assert not list((first / f"weights/step_{STEPS}").glob("*.safetensors"))  # the weights went over the group
    assert [p for node in trainers[1:] for p in files_under(node / "weights")] == []
    # the orchestrator received each version over the group on the first trainer node (port_base + 16 x 1 + 4)
    orch_log = (infer / "logs/orchestrator.log").read_text()
    group = f"tcp://127.0.0.1:{base + PORT_STRIDE + PORT_WEIGHTS}"
    for version in range(1, STEPS):
        assert f"loaded policy version {version} over the weight group at {group} (announced by trainer rank 0 over " \
               "the rollout channel) in " in orch_log, orch_log[-3000:]  # fmt: skip
    assert "weights/step_" not in orch_log

    # the same data-parallel world on one node
    multi = {row["step"]: row for row in read_metrics(first, "trainer")}
    single = single_node_run(env, model)
    assert sorted(multi) == sorted(single) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        for key in ("loss", "grad_norm", "entropy", "loss_tokens"):
            assert multi[step][key] == pytest.approx(single[step][key], rel=1e-5, abs=1e-7), (step, key)
    assert len({round(multi[s]["loss"], 9) for s in multi}) == STEPS  # different steps, not one repeated
