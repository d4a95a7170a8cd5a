"""The admission stage (`prime_rl.orchestrator.admission.admit`): advantages, the zero-advantage filter and the
truncation mask on hand-worked groups; and failures in collection or admission stopping the run at once."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest
from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer
from tests.orchestrator.test_nothing_silent import CycleEnv

from prime_rl.config.orchestrator import GRPOAdvantageConfig, OrchestratorConfig, RendererConfig, RLOOAdvantageConfig
from prime_rl.envs.base import Task
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.admission import AdmissionError, admit, log_masked, max_trained_off_policy
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.types import Rollout, Sample
from prime_rl.transport.atomic import atomic_write_dir


def _r(reward, *, gid=0, k=0, masked=False, truncated=False, versions=(0,)):
    r = Rollout(task=Task(f"t{gid}", "train", gid, []), source="s", group_id=gid, reward=reward,
                truncated=truncated, policy_versions=list(versions), rollout_id=f"t{gid}/g{gid}/r{k}")  # fmt: skip
    r.samples = [Sample([1, 2, 3], [False, True, True], [0.0, -0.5, -0.5])]
    if masked:
        r.mask("env/verify_crash", "ZeroDivisionError: division by zero")
    return r


def _group(rewards, gid, **kw):
    return [_r(x, gid=gid, k=k, **kw) for k, x in enumerate(rewards)]


def test_admit_hand_worked_advantages_filter_and_truncation_mask():
    # group 0: rewards 1, 0, 0.5, 0.5 -> mean 0.5 -> +0.5, -0.5, 0, 0; group 1: all 1 -> all 0 (filtered)
    g0, g1 = _group([1.0, 0.0, 0.5, 0.5], 0), _group([1.0] * 4, 1)
    g0[1].truncated = True
    cfg = GRPOAdvantageConfig(filter_zero=True, mask_truncated=True)
    batch = admit([g0, g1], cfg, step=1)
    assert [r.advantage for r in batch.rollouts] == [0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [r.filtered for r in batch.rollouts] == [False, True, False, False, True, True, True, True]
    assert batch.filtered_groups == 1 and batch.step == 1 and batch.max_off_policy == 0
    # pure: the scheduler's rollouts are not written
    assert all(r.advantage == 0.0 and not r.filtered for r in g0 + g1)


def test_max_off_policy_counts_only_the_rollouts_trained_on():
    # step 5 applies policy 4. Group 0 (versions 3, 4: trained) is 1 behind; group 1 (version 1) is 3 behind but
    # the gate rejects it (a spent budget's filler, out of the loss); a masked rollout of version 0 in group 2 and
    # a truncated one (mask_truncated) of version 2 are out of the loss too: the metric is 4 - 3 = 1, not 4.
    g0 = [_r(1.0, gid=0, k=0, versions=(3, 4)), _r(0.0, gid=0, k=1, versions=(4,))]
    g1 = _group([1.0, 1.0], 1, versions=(1,))
    g2 = [_r(1.0, gid=2, k=0, versions=(4,)), _r(0.0, gid=2, k=1, versions=(4,)),
          _r(0.5, gid=2, k=2, masked=True, versions=(0,)), _r(0.5, gid=2, k=3, truncated=True, versions=(2,))]
    cfg = GRPOAdvantageConfig(mask_truncated=True)
    batch = admit([g0, g1, g2], cfg, step=5, gate=lambda g, c: "uniform" if len({r.reward for r in g}) == 1 else None)
    assert [r.filtered for r in batch.rollouts if r.group_id == 1] == [True, True]
    assert batch.max_off_policy == 1 == max_trained_off_policy(batch.rollouts, 5)
    # nothing trained on: 0
    assert max_trained_off_policy(batch.rollouts[2:4], 5) == 0
    # every rollout trained on: the oldest token counts (version 3 of rollout 0)
    assert admit([g0], cfg, step=5).max_off_policy == 1 and admit([g0], cfg, step=7).max_off_policy == 3


def test_admit_masked_members_leave_the_baseline_and_stay_masked():
    # RLOO over (1, 0) with member 2 masked: 1 - 0 = 1, 0 - 1 = -1, masked 0
    g = _group([1.0, 0.0, 0.7], 3)
    g[2] = _r(0.7, gid=3, k=2, masked=True)
    batch = admit([g], RLOOAdvantageConfig(), step=4)
    assert [r.advantage for r in batch.rollouts] == [1.0, -1.0, 0.0]
    assert batch.rollouts[2].masked and batch.rollouts[2].error_kind == "env/verify_crash"
    assert batch.rollouts[2].error == "env/verify_crash: ZeroDivisionError: division by zero"


def test_admit_masks_an_advantage_the_trainer_cannot_hold():
    """A custom estimator returning NaN or a number beyond float32 (the trainer's dtype) masks that rollout."""
    import prime_rl.orchestrator.advantages as adv

    adv.register_advantage("wild", lambda rewards, mask, cfg: [float("nan"), 1e39, 2.0])
    try:
        cfg = OrchestratorConfig(advantage={"type": "custom", "import_path": "wild"}).advantage
        batch = admit([_group([1.0, 0.0, 0.5], 0)], cfg, step=1)
    finally:
        adv.ADVANTAGES.unregister("wild")
    kinds = [r.error_kind for r in batch.rollouts]
    assert kinds == ["advantage/non_finite", "advantage/non_finite", None]
    assert [r.advantage for r in batch.rollouts] == [0.0, 0.0, 2.0]
    assert "1e+39" in batch.rollouts[1].error_message and "float32" in batch.rollouts[1].error_message


def test_admit_names_the_group_and_its_rollouts_when_the_estimator_raises():
    import prime_rl.orchestrator.advantages as adv

    def boom(rewards, mask, cfg):
        raise ZeroDivisionError("custom estimator bug")

    adv.register_advantage("boom", boom)
    try:
        cfg = OrchestratorConfig(advantage={"type": "custom", "import_path": "boom"}).advantage
        with pytest.raises(AdmissionError) as e:
            admit([_group([1.0, 0.0], 7)], cfg, step=2)
    finally:
        adv.ADVANTAGES.unregister("boom")
    msg = str(e.value)
    assert "step 2" in msg and "group 7" in msg and "t7/g7/r0" in msg and "t7/g7/r1" in msg
    assert "ZeroDivisionError: custom estimator bug" in msg
    assert isinstance(e.value.__cause__, ZeroDivisionError)


def test_masked_reasons_are_logged_per_kind_then_counted(caplog):
    rs = [_r(0.0, gid=0, k=k, masked=True) for k in range(5)]
    timeout = _r(0.0, gid=1, k=0)
    timeout.mask("TimeoutError", "inference request timed out after 60 s")
    with caplog.at_level(logging.WARNING):
        log_masked(3, rs + [timeout], per_kind=3)
    lines = [rec.getMessage() for rec in caplog.records]
    assert sum("masked: env/verify_crash: ZeroDivisionError" in x for x in lines) == 3
    assert any("step 3: 2 more rollout(s) masked as env/verify_crash" in x for x in lines)
    assert any("masked: TimeoutError: inference request timed out" in x and "source 's'" in x for x in lines)


# ---- through the orchestrator: a failing estimator stops the run at once ----


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    return make_renderer(tiny_tokenizer(tmp_path_factory.mktemp("tok")), RendererConfig(name="qwen3"))


async def _run_with_advantage(renderer, tmp_path, fn):
    """The orchestrator with the default 1,800 s weights timeout, beside a fake trainer; the advantage is `fn`.
    Returns the exception the run raised (the test fails if it hangs for 60 s: it waited for the timeout)."""
    import prime_rl.orchestrator.advantages as adv

    adv.register_advantage("flaky", fn)
    cfg = OrchestratorConfig(output_dir=tmp_path / "run", batch_size=4, max_steps=5, seq_len=512,
                             train={"group_size": 2, "sampling": {"max_completion_tokens": 8}},
                             concurrency={"max_inflight": 4}, max_async_level=1,
                             advantage={"type": "custom", "import_path": "flaky"})  # fmt: skip
    assert cfg.weights_timeout_s == 1800
    src = InProcessSource("cyc", CycleEnv([1.0, 0.0]))
    orch = Orchestrator(cfg, client=ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                        train_sources=[src], poll_s=0.005, echo=False)  # fmt: skip

    async def trainer():
        for n in itertools.count(1):
            while not (cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin").exists():
                await asyncio.sleep(0.005)
            atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "x").write_bytes(b"x"))

    t = asyncio.create_task(trainer())
    try:
        with pytest.raises(Exception) as e:
            await asyncio.wait_for(orch.run(), 60)
    finally:
        t.cancel()
        adv.ADVANTAGES.unregister("flaky")
    return e.value, orch


@pytest.mark.parametrize("every_later_call", [False, True])
async def test_an_advantage_that_raises_stops_the_run_with_its_error(renderer, tmp_path, every_later_call):
    calls = itertools.count(1)

    def flaky(rewards, mask, cfg):
        n = next(calls)
        if n == 2 or (every_later_call and n > 2):
            raise KeyError(f"bad key on call {n}")
        return [float(x) - 0.5 for x in rewards]

    err, orch = await _run_with_advantage(renderer, tmp_path, flaky)
    assert isinstance(err, AdmissionError), repr(err)
    assert isinstance(err.__cause__, KeyError) and "bad key on call 2" in str(err)
    assert "/g" in str(err) and "/r0" in str(err) and "/r1" in str(err)  # the group's rollout ids
    assert orch.sched is not None and not orch.sched.running  # nothing left running


async def test_a_failure_in_collection_stops_the_run(renderer, tmp_path, monkeypatch):
    """A rollout task that raises (a bug outside the agent loop's own handling) is not lost: the run stops with it."""
    from prime_rl.orchestrator import scheduler as sched_mod

    real = sched_mod.run_rollout
    n = itertools.count()

    async def buggy(*a, **kw):
        if next(n) == 5:
            raise AttributeError("bug in a rollout")
        return await real(*a, **kw)

    monkeypatch.setattr(sched_mod, "run_rollout", buggy)
    err, _ = await _run_with_advantage(renderer, tmp_path, lambda rewards, mask, cfg: [0.5, -0.5])
    assert isinstance(err, AdmissionError) and isinstance(err.__cause__, AttributeError), repr(err)
    assert "collection of group" in str(err) and "bug in a rollout" in str(err)


def test_no_create_task_result_is_dropped_in_src():
    """Every `asyncio.create_task(...)` in src/ is kept (assigned, appended, returned or passed on)."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    dropped = []
    for p in src.rglob("*.py"):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if re.match(r"\s*(asyncio\.|loop\.|self\._loop\.)?(create_task|ensure_future)\(", line):
                dropped.append(f"{p.relative_to(src)}:{i}: {line.strip()}")
    assert not dropped, dropped



async def test_huge_rewards_are_masked_at_the_reward_check_and_never_reach_the_step(renderer):
    """A reward of 1e308 (its group's sums overflow float64) and one of 1e39 (finite in float64, not in the
    trainer's float32) are masked naming the reward and the range; the others keep a hand-worked baseline."""
    from tests.orchestrator.test_nothing_silent import _cfg, _one_batch

    from prime_rl.orchestrator.step_metrics import step_line, step_metrics

    src = InProcessSource("huge", CycleEnv([1e308, 1e39, 1.0, 0.0, 0.5]))
    batch = await _one_batch(renderer, src, _cfg())
    masked = {r.error_message for r in batch.rollouts if r.masked}
    assert masked == {
        "verify returned reward 1e+308 outside [-1e+06, 1e+06] (expected a finite number within orchestrator.reward_range)",
        "verify returned reward 1e+39 outside [-1e+06, 1e+06] (expected a finite number within orchestrator.reward_range)",
    }
    # valid rewards 1, 0, 0.5: mean 0.5
    assert sorted(r.advantage for r in batch.rollouts if not r.masked) == [-0.5, 0.0, 0.5]
    m = step_metrics(batch, 1.0, 0)
    assert m["errors/env/invalid_reward"] == 2 and m["reward"] == 0.5
    assert "Reward 0.5000" in step_line(1, m)


def test_reward_range_is_configurable_within_what_float32_holds():
    from pydantic import ValidationError

    assert OrchestratorConfig().reward_range == (-1e6, 1e6)
    assert OrchestratorConfig(reward_range=(0, 10)).reward_range == (0.0, 10.0)
    for bad in [(-1e39, 1e39), (1.0, 0.0), (0.0, float("inf"))]:
        with pytest.raises(ValidationError, match="reward_range"):
            OrchestratorConfig(reward_range=bad)


async def test_environment_errors_reach_the_log_a_few_per_kind(renderer, caplog):
    """Rollouts masked by an `EnvError` (here verify crashing in every episode) are logged by the scheduler with
    rollout id, task, source and reason, three per kind and step, then one count."""
    from tests.orchestrator.test_nothing_silent import CrashEnv, _cfg, _one_batch

    with caplog.at_level(logging.WARNING):
        batch = await _one_batch(renderer, InProcessSource("crashy", CrashEnv([1.0])), _cfg())
    assert all(r.masked and r.error_kind == "env/verify_crash" for r in batch.rollouts)
    lines = [rec.getMessage() for rec in caplog.records]
    shown = [x for x in lines if "masked: env/verify_crash: ZeroDivisionError: division by zero" in x]
    assert len(shown) == 3 and all("source 'crashy'" in x and x.startswith("step 1: rollout t") for x in shown)
    assert "step 1: 2 more rollout(s) masked as env/verify_crash" in lines


def test_step_line_prints_large_mean_rewards_in_exponent_form():
    """With a wide `reward_range` a mean reward can be large: 4 significant digits from 1e4 on, never 40 digits."""
    from prime_rl.orchestrator.step_metrics import step_line

    m = {"reward": 0.0, "step_time_s": 1.0, "trainable": 1, "num_rollouts": 2, "trainable_pct": 50.0, "turns": 1.0,
         "max_off_policy": 0, "error_pct": 0.0, "truncated_pct": 0.0}  # fmt: skip
    for reward, text in [(0.75, "Reward 0.7500 |"), (-9999.5, "Reward -9999.5000 |"), (123456.0, "Reward 1.235e+05 |"),
                         (1.25e29, "Reward 1.25e+29 |")]:  # fmt: skip
        assert text in step_line(3, {**m, "reward": reward})
