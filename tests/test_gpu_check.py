"""`scripts/gpu-check.sh --dry`: every step of the GPU check (bf16 trainer with FSDP2, logprob parity bf16 vs fp32,
SFT, RL with the in-process transformers sampler, eval, report) runs on CPU with the tiny model. The real check
needs a CUDA machine (docs/trainer.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_gpu_check_dry_run_on_cpu(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "2"}
    r = subprocess.run(["bash", str(REPO / "scripts/gpu-check.sh"), "--dry", "--sft-steps", "1", "--rl-steps", "2",
                        "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert res["dry"] and res["model"] == "tiny" and [s["step"] for s in res["rl"]] == [1, 2]
    p = res["parity_bf16_vs_fp32"]
    assert p["tokens"] > 0 and 0 < p["max_abs_diff"] < 0.5  # bf16 differs from fp32, but not wildly
    assert all(s["mismatch_kl"] < 1e-3 for s in res["rl"])  # sampler and trainer both bf16, same weights
    assert "| step | reward |" in (tmp_path / "gpu_check.md").read_text()
    assert "weight group: backend gloo, cpu -> cpu" in r.stdout and ": ok" in r.stdout  # scripts/weight_group_check.py
    r = subprocess.run(["bash", str(REPO / "scripts/gpu-check.sh"), "--out", str(tmp_path / "x")], env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "no CUDA device" in r.stderr
