"""Admission and the reward check through the real stack: `rl` on the tiny model (vLLM, torchrun trainer,
orchestrator) with a custom advantage that raises on its second call, and with an environment scoring 1e308 and
1e39. Before: the raising estimator's group was lost in a task nobody awaited and `rl` exited 0 (or, raising on
every later call, hung until `weights_timeout_s`, 1,800 s, here longer than the subprocess timeout); the 1e308
rewards masked their groups as "the advantage estimator returned -inf" or hung the same way, and 1e39 reached the
step line as 124999999999999992463645796450397323264.0000 and stopped the trainer.

Slow: two `rl` runs, about 1.5-2 minutes each on 2 cores (most of it vLLM start-up).
"""

from __future__ import annotations

import json
import math
import os
import re
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


def _rl(tmp_path: Path, env_id: str, extra: str = "", max_steps: int = 3) -> tuple[subprocess.CompletedProcess, Path]:
    run = tmp_path / "run"
    cfg = tmp_path / "rl.toml"
    cfg.write_text(f"""
max_steps = {max_steps}
seq_len = 256
output_dir = "{run}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{cached_tiny_model()}"
[trainer]
threads = 1
[orchestrator]
batch_size = 10
traces_per_step = 10
{extra}
[orchestrator.concurrency]
max_inflight = 10
[orchestrator.train]
group_size = 5
[orchestrator.train.sampling]
max_completion_tokens = 12
[[orchestrator.train.source]]
name = "stub"
env.id = "{env_id}"
[inference.server]
port = {free_port()}
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    r = subprocess.run([str(BIN / "rl"), "@", str(cfg)], capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    return r, run


def test_an_advantage_that_raises_stops_rl_with_its_traceback_and_group(tmp_path):
    extra = '[orchestrator.advantage]\ntype = "custom"\nimport_path = "tests.orchestrator.rl_stubs:raise_on_second_call"'
    r, run = _rl(tmp_path, "tests.integration.fast_env:FastEnv", extra=extra)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-4000:]
    log = (run / "logs" / "orchestrator.log").read_text()
    assert "the orchestrator stopped: AdmissionError: step " in log, log[-4000:]
    assert "KeyError: 'second call'" in log and "Traceback (most recent call last)" in log
    assert "raise_on_second_call" in log  # the traceback reaches the estimator's own frame
    assert re.search(r"admission of group \d+ \(rollouts fast-train-\d+/g\d+/r0, ", log), log[-4000:]
    assert "orchestrator" in out and "Task exception was never retrieved" not in log


def test_huge_rewards_are_masked_at_the_reward_check_and_training_stays_finite(tmp_path):
    r, run = _rl(tmp_path, "tests.orchestrator.rl_stubs:HugeEnv")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    orch = read_metrics(run, "orchestrator")
    assert [m["step"] for m in orch] == [1, 2, 3]
    for m in orch:
        # about 2 of every 5 episodes score 1e308 or 1e39: masked at the reward check, none blamed on advantages
        assert m["error_pct"] == pytest.approx(10 * m.get("errors/env/invalid_reward", 0))
        assert "errors/advantage/non_finite" not in m and 0.0 <= m["reward"] <= 1.0 and m["loss_tokens"] > 0
    assert sum(m.get("errors/env/invalid_reward", 0) for m in orch) >= 6
    log = (run / "logs" / "orchestrator.log").read_text()
    steps = re.findall(r"Step \d/3 \|[^\n]*", log)
    assert len(steps) == 3 and all(re.search(r"\| Reward [01]\.\d{4} \|", line) for line in steps), steps
    assert "masked: env/invalid_reward: verify returned reward 1e+308 outside [-1e+06, 1e+06]" in log
    assert "masked: env/invalid_reward: verify returned reward 1e+39 outside [-1e+06, 1e+06]" in log
    for n in (1, 2, 3):
        traces = [json.loads(x) for x in (run / f"rollouts/step_{n}/traces.jsonl").read_text().splitlines()]
        assert all(math.isfinite(t["advantage"]) and abs(t["advantage"]) <= 1 for t in traces)
    trainer = read_metrics(run, "trainer")
    assert [m["step"] for m in trainer] == [1, 2, 3]
    assert all(m["nonfinite"] == 0.0 and math.isfinite(m["loss"]) for m in trainer)
    w = load_file(str(run / "weights" / "step_3" / "model.safetensors"))
    assert all(bool(torch.isfinite(t).all()) for t in w.values())
