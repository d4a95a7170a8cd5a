"""A streak of errored rollouts stops the run (`orchestrator.max_consecutive_errors`, `max_error_rate`): the counter
on hand-made rollouts, and an orchestrator run on an environment whose verify always raises, stopped in its first
step instead of after `max_empty_steps` empty steps."""

from __future__ import annotations

import pytest
from tests.orchestrator.fakes import ScriptedClient
from tests.orchestrator.test_nothing_silent import CrashEnv
from tests.orchestrator.test_run_outcomes import _cfg, _run, renderer  # noqa: F401 (fixture)

from prime_rl.envs.base import Task
from prime_rl.orchestrator import main as om
from prime_rl.orchestrator.error_streak import ErrorStreak, ErrorStreakError
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.types import Rollout


def _r(source: str, kind: str | None = None, msg: str = "boom") -> Rollout:
    r = Rollout(task=Task("t", "train", 0, []), source=source)
    if kind is not None:
        r.mask(kind, msg)
    return r


def test_consecutive_errors_trip_at_the_limit_and_an_ok_rollout_resets_the_streak():
    s = ErrorStreak(max_consecutive=3)
    assert s.observe([_r("a", "env/x"), _r("a", "env/x"), _r("b")]) is None  # 2, then reset
    assert s.observe([_r("a", "env/x"), _r("b", "TimeoutError", "slow")]) is None  # 2 in a row
    msg = s.observe([_r("b", "env/y", "bad json"), _r("a")])  # 3rd in a row trips before the ok one is counted
    assert msg is not None and msg.startswith("3 consecutive rollouts masked (orchestrator.max_consecutive_errors = 3)")
    assert "error kinds: env/x 1, TimeoutError 1, env/y 1." in msg  # the streak's kinds only (the reset cleared 2)
    # the last errors per source, older ones of the source first, at most `keep` each
    assert "source 'a': env/x: boom | env/x: boom | env/x: boom" in msg
    assert "source 'b': TimeoutError: slow | env/y: bad json" in msg
    assert s.observe([_r("a")]) == msg  # stays tripped


def test_error_rate_over_a_full_window():
    s = ErrorStreak(max_consecutive=None, max_rate=0.5, window=4)
    assert s.observe([_r("a", "k"), _r("a"), _r("a", "k")]) is None  # window not full yet
    assert s.observe([_r("a")]) is None  # 2 of 4 = 0.5, not above
    assert s.observe([_r("a", "k")]) is None  # window [ok, k, ok, k]: 2 of 4
    msg = s.observe([_r("a", "k")])
    assert msg is not None and msg.startswith("3 of the last 4 rollouts masked (75% > orchestrator.max_error_rate = 0.5")
    assert "error kinds: k 3" in msg


def test_off_by_default():
    s = ErrorStreak(None, None)
    assert not s.enabled and s.observe([_r("a", "k")] * 100) is None


async def test_an_always_erroring_environment_stops_the_run_in_its_first_step(renderer, tmp_path):  # noqa: F811
    """4 rollouts a step, 10 steps, max_empty_steps = 5; max_consecutive_errors = 4 stops at step 1 (without it the
    run ends with NoProgressError after 5 empty steps)."""
    cfg = _cfg(tmp_path, max_steps=10, max_consecutive_errors=4)
    orch = om.Orchestrator(cfg, client=ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                           train_sources=[InProcessSource("crashy", CrashEnv([1.0]))], poll_s=0.005, echo=False)  # fmt: skip
    with pytest.raises(ErrorStreakError) as e:
        await _run(orch, cfg)
    msg = str(e.value)
    assert msg.startswith("4 consecutive rollouts masked (orchestrator.max_consecutive_errors = 4)")
    assert "error kinds: env/verify_crash 4" in msg and "source 'crashy': env/verify_crash: " in msg
    assert "ZeroDivisionError" in msg
    assert not (cfg.output_dir / "rollouts" / "step_1" / "rank_0.bin").exists()  # stopped before writing a step
