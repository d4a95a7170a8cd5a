"""`sft` with `[slurm]` on 2 nodes of the real local cluster (torchrun 2 nodes x 1 process, c10d, gloo): the job
ends COMPLETED, the two ranks ran on two different nodes, and the published weights and per-step loss equal a
single-node 2-process run of the same config. About 1 minute on 2 cores."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from safetensors.torch import load_file
from tests.slurm.conftest import BIN, job_env, submit, tail, wait_job, wait_no_leftovers
from tests.slurm.test_slurm_rl import free_block

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # slow on a busy machine


def test_sft_two_nodes(slurm_cluster, tmp_path):
    tiny = cached_tiny_model(hidden=64, layers=2)
    data = tmp_path / "sft.jsonl"
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Say {w}."},
                                                     {"role": "assistant", "content": w}]}) + "\n" for w in words))
    cfg = tmp_path / "sft.toml"
    cfg.write_text(f"""
output_dir = "{tmp_path / 'run'}"
max_steps = 3
seq_len = 128
threads = 1
[model]
name = "{tiny}"
[data]
path = "{data}"
batch_size = 4
[deployment]
num_nodes = 2
cpu_procs = 1
port_base = {free_block(1)}
[slurm]
job_name = "prime-rl-sft-test"
""")
    env = job_env(slurm_cluster)
    run = tmp_path / "run"
    job, _ = submit([str(BIN / "sft"), "@", str(cfg)], env)
    job_log = run / "slurm" / f"job_{job}.log"
    assert wait_job(job, env, job_log, timeout_s=900) == ("COMPLETED", "0:0"), tail(job_log)
    assert (run / "weights/step_3/STABLE").is_file()
    ranks = dict(re.findall(r"sft rank (\d)/2 on cpu, node (\S+)", (run / "logs/sft.log").read_text()))
    assert sorted(ranks) == ["0", "1"] and set(ranks.values()) == {"node1", "node2"}, ranks
    assert wait_no_leftovers(str(tmp_path)) == []

    ref = tmp_path / "ref"
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_block(1)),
         "-m", "prime_rl.cli.sft", "@", str(run / "configs/sft.toml"), "--output-dir", str(ref),
         "--deployment.num-nodes", "1", "--deployment.port-base", "29500", "--slurm", "None"], capture_output=True, text=True, timeout=300, env=job_env({}),
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    multi = {row["step"]: row["loss"] for row in read_metrics(run, "sft")}
    single = {row["step"]: row["loss"] for row in read_metrics(ref, "sft")}
    assert sorted(multi) == [1, 2, 3] and multi == pytest.approx(single, rel=1e-5)
    a = load_file(str(run / "weights/step_3/model.safetensors"))
    b = load_file(str(ref / "weights/step_3/model.safetensors"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6
