"""`rl` forks another run's checkpoint (`[ckpt] resume_dir`) into a new output_dir, end to end on the tiny model
(real vLLM, torchrun trainer, orchestrator): run A (2 steps, checkpoint at step 2), then run B from A's step 2 to
step 4. B's trainer publishes A's policy version 2 in B, its orchestrator and trainer log steps 3 and 4 only, and
A is left as it was.

Slow: two `rl` runs, about 1.5 minutes each on 2 cores (most of it vLLM start-up).
"""

from __future__ import annotations

import pytest
from tests.orchestrator.test_admission_rl import _rl

from prime_rl.monitor.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_rl_forks_a_checkpoint_into_a_new_run(tmp_path):
    env = "tests.integration.fast_env:FastEnv"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r, run_a = _rl(tmp_path / "a", env, extra="[ckpt]\ninterval = 2", max_steps=2)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    ckpt = run_a / "checkpoints" / "step_2"
    assert (ckpt / "trainer" / "STABLE").is_file() and (ckpt / "orchestrator" / "STABLE").is_file()
    before = sorted(p.name for p in run_a.rglob("*"))
    r, run_b = _rl(tmp_path / "b", env, extra=f'[ckpt]\nresume_dir = "{ckpt}"', max_steps=4)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert [m["step"] for m in read_metrics(run_b, "orchestrator")] == [3, 4]
    assert [m["step"] for m in read_metrics(run_b, "trainer")] == [3, 4]
    assert (run_b / "weights" / "step_2" / "STABLE").is_file()  # A's policy, published by B's trainer
    assert "resumed from" in (run_b / "logs" / "trainer.log").read_text()
    assert sorted(p.name for p in run_a.rglob("*")) == before
