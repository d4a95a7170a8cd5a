"""`rl` on the tiny model (vLLM, torchrun trainer, orchestrator) with an environment whose every verify raises and
`orchestrator.max_consecutive_errors = 10`: the run stops non-zero in its first steps, naming the streak and the
last errors of the source, long before `max_empty_steps` (here 8) empty steps of a 20-step run.

Slow: one `rl` run, about 1.5 minutes on 2 cores (most of it vLLM start-up).
"""

from __future__ import annotations

import pytest
from tests.orchestrator.test_admission_rl import _rl

from prime_rl.monitor.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_an_always_erroring_environment_stops_rl_on_the_error_streak(tmp_path):
    extra = "max_empty_steps = 8\nmax_consecutive_errors = 10"
    r, run = _rl(tmp_path, "tests.orchestrator.rl_stubs:AlwaysErrorEnv", extra=extra, max_steps=20)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-4000:]
    log = (run / "logs" / "orchestrator.log").read_text()
    assert "consecutive rollouts masked (orchestrator.max_consecutive_errors = 10)" in log, log[-4000:]
    assert "source 'stub': env/verify_crash: ConnectionError: verifier unreachable" in log, log[-4000:]
    steps = [m["step"] for m in read_metrics(run, "orchestrator")]
    assert max(steps, default=0) < 8, steps  # stopped well before max_empty_steps
    assert "NoProgressError" not in log and "consecutive steps with nothing to train" not in log
