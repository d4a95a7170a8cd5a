"""`rl` on a real 3-node Slurm cluster (scripts/local-slurm.sh): 1 inference node + 2 trainer nodes (torchrun
2 nodes x 1 process, gloo, static rendezvous), the tiny model, a fake-fast environment.

1. scancel mid-run: every node stops its processes (SIGTERM, logged per node), the job is CANCELLED, nothing is
   left running; `rl --resume` then submits a job that continues from the newest checkpoint to the end: it ends
   COMPLETED in sacct, every policy version is published, the two trainer ranks ran on two different Slurm nodes,
   the published weights and per-step loss / grad norm equal a single-node 2-process trainer run on the same
   rollouts, and nothing is left running. (One run for both: a finished 3-step job of its own cost one more vLLM
   start-up and checked nothing the resumed job does not.)
2. A trainer rank SIGKILLed on one node fails the job, naming the node and the process.

About 4 minutes on 2 cores (each job is mostly vLLM start-up).
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.slurm.conftest import BIN, job_env, leftovers, submit, tail, wait_job, wait_no_leftovers

from prime_rl.config.deployment import PORT_STRIDE
from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import port_free

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # two jobs with vLLM start-ups on a busy machine


def free_block(n: int) -> int:
    """A base port with `n` free ports after it (deployment.port_base)."""
    for _ in range(200):
        base = random.randrange(20000, 30000)
        if all(port_free("127.0.0.1", base + i) for i in range(n)):
            return base
    raise RuntimeError("no free port block")


def write_config(tmp: Path, model: Path, steps: int, ckpt_interval: int | None = None, delay_s: float = 0.0) -> Path:
    cfg = tmp / "rl.toml"
    ckpt = f"[ckpt]\ninterval = {ckpt_interval}\nkeep_last = 10\n" if ckpt_interval else ""
    cfg.write_text(f"""
output_dir = "{tmp / 'run'}"
max_steps = {steps}
seq_len = 256
startup_timeout_s = 900
stop_grace_s = 5  # after scancel vLLM ignored SIGTERM for the whole grace (15 s) and was SIGKILLed: a longer one only waits
{ckpt}
[model]
name = "{model}"
[deployment]
type = "multi-node"
num_infer_nodes = 1
num_train_nodes = 2
cpu_train_procs = 1
port_base = {free_block(3 * PORT_STRIDE)}
[orchestrator]
batch_size = 8
max_async_level = 0
max_empty_steps = "None"  # at lr 0.05 every group may reach reward 1 before the last step: the run goes on
[orchestrator.concurrency]
max_inflight = 8
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 12
[[orchestrator.train.source]]
name = "fast"
env.id = "tests.integration.fast_env:FastEnv"
env.args = {{ delay_s = {delay_s} }}
[trainer]
threads = 1
[trainer.optim]
lr = 0.05
[slurm]
job_name = "prime-rl-test"
partition = "debug"
time = "00:15:00"
""")
    return cfg


@pytest.fixture(scope="module")
def tiny() -> Path:
    return cached_tiny_model(hidden=64, layers=2)


def test_scancel_stops_cleanly_then_resume(slurm_cluster, tmp_path, tiny):
    """One run, two jobs (each job is mostly vLLM start-up, so one run serves both checks that used to have a
    run each): job 1 is scancelled after its step-2 checkpoint and must stop cleanly on every node; job 2
    (`rl --resume`) must finish the run COMPLETED with the trainer ranks on the two trainer nodes, and the run's
    weights and per-step metrics must equal a single-node 2-process trainer run over the same rollouts (so the
    multi-node resume is exact, too)."""
    env = job_env(slurm_cluster)
    # A step of this run takes well under a second, and scancel can take a few seconds to reach the job: 16 steps,
    # each slowed by 0.4 s of scoring (8 rollouts x 0.05 s), leave 14 steps between the step-2 checkpoint and the
    # end of the run.
    steps = 16
    cfg = write_config(tmp_path, tiny, steps=steps, ckpt_interval=1, delay_s=0.05)
    run = tmp_path / "run"
    job, printed = submit([str(BIN / "rl"), "@", str(cfg)], env)
    for what in ("job log:", "scancel " + job, "squeue -j " + job):
        assert what in printed
    job_log = run / "slurm" / f"job_{job}.log"
    deadline = time.monotonic() + 900  # vLLM start-up alone took 300 s on a busy 2-core machine
    while not ((run / "checkpoints/step_2/trainer/STABLE").is_file()
               and (run / "checkpoints/step_2/orchestrator/STABLE").is_file()):
        assert time.monotonic() < deadline, "no step-2 checkpoint in time:\n" + tail(job_log)
        time.sleep(0.5)
    assert leftovers(str(tmp_path)), "the job should be running"
    subprocess.run(["scancel", job], env=env, check=True, timeout=30)
    state = wait_job(job, env, job_log, timeout_s=180)
    assert state[0] == "CANCELLED", (state, tail(job_log))
    assert wait_no_leftovers(str(tmp_path)) == []
    log = job_log.read_text()
    for i, name in enumerate(("node1", "node2", "node3")):  # every node stopped its own processes
        assert f"node {i} ({name}): SIGTERM received: stopped every process of this node" in log, tail(job_log)
    assert "died" not in log, tail(job_log)
    assert not (run / f"weights/step_{steps}/STABLE").exists()

    t_resume = time.time()
    job2, _ = submit([str(BIN / "rl"), "@", str(cfg), "--resume"], env)
    job_log2 = run / "slurm" / f"job_{job2}.log"
    state = wait_job(job2, env, job_log2)
    assert state == ("COMPLETED", "0:0"), tail(job_log2)
    log2 = job_log2.read_text()
    m = re.search(r"resuming from checkpoint step (\d+)", log2)
    assert m and int(m.group(1)) >= 2, tail(job_log2)
    resumed = int(m.group(1))
    assert "node 0 (node1, 127.0.0.1): inference replica 0" in log2 and "orchestrator" in log2
    assert (run / f"weights/step_{steps}/STABLE").is_file()  # (weights.keep_last = 3 removed the oldest)
    orch_log = (run / "logs/orchestrator.log").read_text()
    for n in range(1, steps):  # every policy version was published and loaded for sampling (max_async_level 0)
        assert f"loaded policy version {n} from" in orch_log, n
    rows = read_metrics(run, "orchestrator")
    assert {r["step"] for r in rows} == set(range(1, steps + 1))
    after = [r["step"] for r in rows if r["time"] >= t_resume]
    assert sorted(after) == list(range(resumed + 1, steps + 1))  # the resumed job did only the rest
    # the log holds both jobs' lines; the last per rank (the resumed job's) wins
    ranks = dict(re.findall(r"trainer rank (\d)/2 on cpu, node (\S+),", (run / "logs/trainer.log").read_text()))
    assert sorted(ranks) == ["0", "1"] and len(set(ranks.values())) == 2, ranks
    assert set(ranks.values()) == {"node2", "node3"}  # the two trainer nodes of the layout
    assert wait_no_leftovers(str(tmp_path)) == []

    # The same training on one node with 2 processes, from scratch, on the rollouts the run trained on (steps up
    # to the checkpoint from job 1, the rest from job 2: `--resume` deleted job 1's later ones).
    ref = tmp_path / "ref"
    shutil.copytree(run / "rollouts", ref / "rollouts")
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
         str(free_block(1)), "-m", "prime_rl.cli.trainer", "@", str(run / "configs/trainer.toml"),
         "--output-dir", str(ref), "--ckpt.resume-step", "None", "--ckpt.interval", "None"], capture_output=True,
        text=True, timeout=300, env=job_env({}),
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    multi = {row["step"]: row for row in read_metrics(run, "trainer")}  # the last row of a step: job 2 redid it
    single = {row["step"]: row for row in read_metrics(ref, "trainer")}
    assert sorted(multi) == sorted(single) == list(range(1, steps + 1))
    for step in range(1, steps + 1):
        for key in ("loss", "grad_norm", "entropy", "loss_tokens"):
            assert multi[step][key] == pytest.approx(single[step][key], rel=1e-5, abs=1e-7), (step, key)
    a = load_file(str(run / f"weights/step_{steps}/model.safetensors"))
    b = load_file(str(ref / f"weights/step_{steps}/model.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
    assert any(not torch.equal(a[k], load_file(str(tiny / "model.safetensors"))[k]) for k in a)  # it trained


def test_a_dead_trainer_rank_fails_the_job_naming_node_and_process(slurm_cluster, tmp_path, tiny):
    import os
    import signal

    import psutil

    env = job_env(slurm_cluster)
    cfg = write_config(tmp_path, tiny, steps=20)
    run = tmp_path / "run"
    job, _ = submit([str(BIN / "rl"), "@", str(cfg)], env)
    job_log = run / "slurm" / f"job_{job}.log"
    deadline = time.monotonic() + 900
    while not (run / "weights/step_1/STABLE").is_file():
        assert time.monotonic() < deadline, "no policy version 1 in time:\n" + tail(job_log)
        time.sleep(0.5)
    ranks = [p for p in psutil.process_iter(["cmdline", "environ"])
             if "prime_rl.cli.trainer" in " ".join(p.info["cmdline"] or []) and str(run) in " ".join(p.info["cmdline"] or [])
             and "torch.distributed.run" not in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    victim = next(p for p in ranks if (p.info["environ"] or {}).get("SLURMD_NODENAME") == "node3")
    os.kill(victim.pid, signal.SIGKILL)
    state = wait_job(job, env, job_log, timeout_s=180)
    assert state[0] == "FAILED" and state[1] != "0:0", (state, tail(job_log))
    log = job_log.read_text()
    assert re.search(r"trainer on node 2 \(node3\) died \(exit code \d+\)", log), tail(job_log)
    assert "Last lines of" in log and "trainer.node2.console.log" in log
    assert wait_no_leftovers(str(tmp_path)) == []
    assert not (run / "weights/step_20/STABLE").exists()
