"""The deployment simulator (`prime-rl plan`) against hand-worked pipelines.

The base case: one replica decoding 8 sequences of 100 tokens at 800 tokens/s all together (1 s a batch; prefill
free), a trainer at 400 tokens/s on 800 tokens (2 s a step), publish 0.2 s, load 0.3 s.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from prime_rl.config.plan import PlanConfig
from prime_rl.simulate.events import EventQueue
from prime_rl.simulate.pipeline import InfeasiblePlan, Pipeline
from prime_rl.simulate.replica import Replica, Request, iteration_times
from prime_rl.simulate.report import simulate

BASE = {
    "inference": {"single_seq_tokens_per_s": 100, "peak_tokens_per_s": 800, "peak_batch": 8,
                  "prefill_tokens_per_s": 1e12},
    "workload": {"prompt_tokens": 0, "completion_tokens": 100},
    "pipeline": {"batch_size": 8, "group_size": 8, "max_inflight": 8},
    "trainer": {"tokens_per_s": 400},
    "weights": {"publish_s": 0.2, "load_s": 0.3},
    "steps": 10,
    "warmup_steps": 2,
}  # fmt: skip


def cfg(**over) -> PlanConfig:
    d = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    for key, val in over.items():
        section, _, field = key.partition("__")
        if field:
            d[section][field] = val
        else:
            d[section] = val
    return PlanConfig.model_validate(d)


def test_synchronous_step_is_inference_plus_trainer_plus_weights():
    r = simulate(cfg(pipeline__max_async_level=0))
    assert r.step_time_s == pytest.approx(1.0 + 2.0 + 0.2 + 0.3)
    assert r.off_policy_tokens == {0: 1.0}
    assert set(r.max_off_policy) == {0}
    assert r.inference_idle == pytest.approx(1 - (1.0 + 0.3) / 3.5)
    assert r.inference_loading == pytest.approx(0.3 / 3.5)
    assert r.trainer_idle == pytest.approx(1 - 2.2 / 3.5)
    assert r.rollouts_per_s == pytest.approx(8 / 3.5)
    assert r.inference_mean_batch == pytest.approx(8.0)


def test_async_1_with_fast_inference_is_trainer_bound_one_version_behind():
    r = simulate(cfg(pipeline__max_async_level=1))
    assert r.step_time_s == pytest.approx(2.0 + 0.2)
    assert r.trainer_idle == pytest.approx(0.0, abs=1e-9)
    assert r.off_policy_tokens == {1: 1.0}
    assert set(r.max_off_policy) == {1}


def test_async_2_runs_two_versions_behind_at_the_same_step_time():
    r = simulate(cfg(pipeline__max_async_level=2))
    assert r.step_time_s == pytest.approx(2.2)
    assert r.off_policy_tokens == {2: 1.0}


def test_inference_bound_async_1_step_is_sampling_plus_the_load_pause():
    # 300 tokens a sequence: 3 s a batch; the trainer's 2400 tokens at 2400 tokens/s take 1 s
    r = simulate(cfg(pipeline__max_async_level=1, workload__completion_tokens=300, trainer__tokens_per_s=2400))
    assert r.step_time_s == pytest.approx(3.0 + 0.3)
    assert r.trainer_idle == pytest.approx(1 - 1.2 / 3.3)
    assert r.inference_idle == pytest.approx(0.0, abs=1e-9)


def test_broadcast_overlaps_publish_and_load():
    # synchronous: the load starts with the publish, so the step is 1 + 2 + max(0.2, 0.3)
    r = simulate(cfg(pipeline__max_async_level=0, weights__transport="broadcast"))
    assert r.step_time_s == pytest.approx(1.0 + 2.0 + 0.3)


def test_control_plane_bound():
    # 16 one-turn rollouts a step at 1 s of CPU each: 16 s a step on one worker, 8 s on two (a group per worker);
    # max_inflight covers two steps, so the next step's CPU work overlaps the last rollouts' decoding
    c = {"pipeline__batch_size": 16, "pipeline__max_inflight": 32, "pipeline__max_async_level": 1,
         "trainer__tokens_per_s": 1e9, "weights__publish_s": 0.0, "weights__load_s": 0.0,
         "inference__peak_batch": 16, "inference__peak_tokens_per_s": 1600}  # fmt: skip
    one = simulate(cfg(**c, control_plane={"workers": 1, "cpu_per_turn_s": 1.0}))
    two = simulate(cfg(**c, control_plane={"workers": 2, "cpu_per_turn_s": 1.0}))
    assert one.step_time_s == pytest.approx(16.0)
    assert two.step_time_s == pytest.approx(8.0)
    assert one.control_plane_busy == pytest.approx(1.0)


def test_scheduler_bound_whatever_the_workers():
    # 16 one-turn rollouts a step; inference decodes them in 1 s, 1 worker spends 16 x 0.25 = 4 s, the trainer and
    # weights are free; the one scheduler process takes 1 s per finished rollout: it is busy without a gap (two steps'
    # rollouts in flight keep its queue full), so a step takes 16 x 1 s and rollouts/s = 1 / 1 s, on 1 worker or 4
    c = {"pipeline__batch_size": 16, "pipeline__max_inflight": 32, "pipeline__max_async_level": 1,
         "trainer__tokens_per_s": 1e9, "weights__publish_s": 0.0, "weights__load_s": 0.0,
         "inference__peak_batch": 16, "inference__peak_tokens_per_s": 1600}  # fmt: skip
    runs = [simulate(cfg(**c, control_plane={"workers": w, "cpu_per_turn_s": 0.25, "scheduler_cpu_per_rollout_s": 1.0}))
            for w in (1, 4)]  # fmt: skip
    for r in runs:
        assert r.step_time_s == pytest.approx(16.0)
        assert r.rollouts_per_s == pytest.approx(1.0)
        assert r.scheduler_busy == pytest.approx(1.0)
    assert runs[0].control_plane_busy == pytest.approx(4.0 / 16.0)  # the worker is 25% busy
    # 4 workers take the groups in turn: each does 1 group of 8 turns per 2 steps (2 s of 32 s)
    assert runs[1].control_plane_busy == pytest.approx(8 * 0.25 / 32.0)
    # a cheaper scheduler (0.1 s a rollout, 1.6 s a step) leaves the worker the bound again: 16 x 0.25 s on one
    cheap = simulate(cfg(**c, control_plane={"workers": 1, "cpu_per_turn_s": 0.25, "scheduler_cpu_per_rollout_s": 0.1}))
    assert cheap.step_time_s == pytest.approx(4.0)
    assert cheap.scheduler_busy == pytest.approx(1.6 / 4.0)


def test_scheduler_in_the_synchronous_step():
    # max_async_level 0: the 8 rollouts finish decoding together at 1 s, the scheduler serves them one after the
    # other (0.25 s each), then the trainer (2 s), publish 0.2 s and load 0.3 s: 1 + 2 + 2.2 + 0.3 = 5.5 s a step
    r = simulate(cfg(pipeline__max_async_level=0, control_plane={"scheduler_cpu_per_rollout_s": 0.25}))
    assert r.step_time_s == pytest.approx(1.0 + 8 * 0.25 + 2.0 + 0.2 + 0.3)
    assert r.scheduler_busy == pytest.approx(2.0 / 5.5)


def test_replica_batch_behaviour_from_two_points():
    inf = cfg().inference
    t0, t1 = iteration_times(inf)
    assert t0 + t1 == pytest.approx(1 / 100)  # one sequence alone: 100 tokens/s
    assert (t0 + 8 * t1) == pytest.approx(8 / 800)  # 8 together: 800 tokens/s
    q = EventQueue()
    rep = Replica(0, q, inf)
    ends: list[float] = []
    rep.submit(Request(0, 50, lambda v: ends.append(q.now)))
    q.run(lambda: False)
    assert ends == [pytest.approx(0.5)]
    # 4 sequences: t(4) = t0 + 4 t1; the 100-token one finishes after the three 50-token ones and then runs alone
    ends.clear()
    start = q.now
    for n in (50, 50, 50, 100):
        rep.submit(Request(0, n, lambda v: ends.append(q.now - start)))
    q.run(lambda: False)
    t4 = t0 + 4 * t1
    assert ends == pytest.approx([50 * t4] * 3 + [50 * t4 + 50 * (t0 + t1)])


def test_prefill_and_overhead_hold_decoding():
    inf = cfg(inference__prefill_tokens_per_s=100.0, inference__request_overhead_s=0.5).inference
    q = EventQueue()
    rep = Replica(0, q, inf)
    ends: list[float] = []
    rep.submit(Request(100, 10, lambda v: ends.append(q.now)))
    q.run(lambda: False)
    assert ends == [pytest.approx(0.5 + 1.0 + 10 / 100)]


def test_weight_load_sets_versions_of_later_turns():
    # a turn that starts during a load gets the new version; the orchestrator's off-policy follows
    p = Pipeline(cfg(pipeline__max_async_level=1)).run()
    assert all(v in (0, 1) for v in p.cuts[0].lag_tokens)  # step 1 sampled with version 0: lag 0
    assert p.cuts[0].lag_tokens == {0: 800}
    assert p.loads[0][2] == 1 and p.loads[0][1] - p.loads[0][0] == pytest.approx(0.3)


def test_seeded_and_deterministic():
    c = cfg(workload__completion_tokens_cv=0.5, env={"latency_s": 0.1, "latency_cv": 1.0})
    assert simulate(c).to_dict() == simulate(c).to_dict()
    other = c.model_copy(update={"seed": 1})
    assert simulate(other).step_time_s != simulate(c).step_time_s


def test_stale_bound_drops_groups():
    # async 1 but nothing older than 0 versions may train: the lag-1 groups are dropped and sampled again
    r = simulate(cfg(pipeline__max_async_level=1, pipeline__max_off_policy_steps=0))
    assert r.off_policy_tokens == {0: 1.0}
    assert r.dropped_groups > 0


def test_infeasible_plan_is_reported():
    p = Pipeline(cfg(pipeline__max_async_level=1))
    p.cfg = p.cfg.model_copy(update={"steps": 10**9})
    p.q.run = lambda until, max_events=0: None  # nothing runs: the pipeline stalls
    with pytest.raises(InfeasiblePlan, match="stalled after 0 trainer steps"):
        p.run()


@pytest.mark.parametrize(
    "over, msg",
    [
        ({"inference__peak_tokens_per_s": 900}, "peak_tokens_per_s"),
        ({"pipeline__batch_size": 12}, "multiple of pipeline.group_size"),
        ({"warmup_steps": 10}, "warmup_steps"),
    ],
)
def test_config_refuses_inconsistent_inputs(over, msg):
    with pytest.raises(ValueError, match=msg):
        cfg(**over)


def test_cli_prints_prediction_and_json(tmp_path):
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "plan", "--pipeline.max-async-level", "0",
                        "--json-out", str(out)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "step time" in r.stdout and "off-policy (tokens)  0: 100.0%" in r.stdout
    assert '"step_time_s"' in out.read_text()
    bad = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "plan", "--inference.peak-tokens-per-s",
                          "1e9"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "peak_tokens_per_s" in bad.stderr


def test_the_report_writes_large_rates_as_whole_numbers():
    from prime_rl.simulate.report import format_result, rate

    assert [rate(x) for x in (26.04, 3457.2, 9999.4, 10_000.0, 12_090.4)] == ["26.04", "3457", "9999", "10,000", "12,090"]
    cfg = PlanConfig(inference={"replicas": 4}, pipeline={"max_async_level": 2})  # bound by the 10,000 tokens/s trainer
    res = simulate(cfg)
    assert res.trained_tokens_per_s >= 10_000
    line = next(ln for ln in format_result(cfg, res).splitlines() if "trained tokens/s" in ln)
    assert f"{res.trained_tokens_per_s:,.0f} trained tokens/s" in line and "e+" not in line
