"""Issue 13's reproduction through `rl`: a tiny in-process environment whose rewards cycle through NaN, 1, 0, 1,
0.5, three RL steps on the tiny model (real vLLM, torchrun trainer, orchestrator, eval). Before the fix the NaN made
its group's advantages NaN, the trainer logged `loss nan` and published 100% NaN weights, and `rl` exited 0. Now the
NaN-scored rollouts are masked (counted under Error, logged naming task and source), everything trained and
published is finite, and the run finishes.

Slow: one `rl` run, about 1.5-2 minutes on 2 cores (most of it vLLM start-up).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_nan_rewards_through_rl_are_masked_and_nothing_non_finite_is_trained(tmp_path):
    run = tmp_path / "run"
    cfg = tmp_path / "rl.toml"
    cfg.write_text(f"""
max_steps = 3
seq_len = 256
output_dir = "{run}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{cached_tiny_model()}"
[trainer]
threads = 1
[trainer.optim]
lr = 0.05
[orchestrator]
batch_size = 10
traces_per_step = 10
[orchestrator.concurrency]
max_inflight = 10
[orchestrator.train]
group_size = 5
[orchestrator.train.sampling]
max_completion_tokens = 12
[[orchestrator.train.source]]
name = "nan"
env.id = "tests.integration.nan_env:NaNEnv"
[orchestrator.eval]
interval = 3
num_examples = 4
rollouts_per_example = 5
[orchestrator.eval.sampling]
max_completion_tokens = 8
[inference.server]
port = {free_port()}
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    r = subprocess.run([str(BIN / "rl"), "@", str(cfg)], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]

    orch = read_metrics(run, "orchestrator")
    assert [m["step"] for m in orch] == [1, 2, 3]
    assert sum(m.get("errors/env/invalid_reward", 0) for m in orch) >= 3  # about every 5th rollout
    for m in orch:
        assert math.isfinite(m["reward"]) and m["loss_tokens"] > 0
        assert m["error_pct"] == pytest.approx(10 * m.get("errors/env/invalid_reward", 0))
    log = (run / "logs" / "orchestrator.log").read_text()
    assert "masked: env/invalid_reward: verify returned reward nan" in log and "source 'nan'" in log
    assert "task 'fast-train-" in log
    for n, m in zip((1, 2, 3), orch, strict=True):
        traces = [json.loads(x) for x in (run / f"rollouts/step_{n}/traces.jsonl").read_text().splitlines()]
        assert len(traces) == 10 and all(math.isfinite(t["advantage"]) and math.isfinite(t["reward"]) for t in traces)
        masked = [t for t in traces if t["masked"]]
        assert len(masked) == m.get("errors/env/invalid_reward", 0) and all(t["advantage"] == 0.0 for t in masked)
    trainer = read_metrics(run, "trainer")
    assert [m["step"] for m in trainer] == [1, 2, 3]
    for m in trainer:
        assert m["nonfinite"] == 0.0 and math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0
    w = load_file(str(run / "weights" / "step_3" / "model.safetensors"))
    assert all(bool(torch.isfinite(t).all()) for t in w.values())
    ev = {m["step"]: m for m in read_metrics(run, "eval")}
    assert set(ev) == {0, 3}
    for m in ev.values():
        assert math.isfinite(m["eval/avg@5"]) and 0 < m["eval/error_pct"] < 100
    rows = [json.loads(x) for x in (run / "eval" / "step_3.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["avg"] is not None and math.isfinite(r["avg"]) for r in rows)
