"""The capacity table's arithmetic (split, workers, configs) and one small row, computed independently."""

from __future__ import annotations

import math

import pytest

from prime_rl.simulate.capacity import CapacityInputs, balanced_split, capacity_row, plan_config, workers_for

X = CapacityInputs()


def test_inputs_are_the_cited_figures():
    assert X.trainer_tokens_per_s_per_gpu == pytest.approx(27_440 / 8)  # 27.44k tokens/s on 8 H200
    assert X.inference_peak_tokens_per_s == pytest.approx(6_595.66 / 2 * 14.8 / 4.0)
    assert X.rollout_tokens == 1000 + 4 * 200 + 3 * 70
    # HTTP, rollout workers (docs/results/2026-12-04-control-plane-workers-quiet.md): 2.08-2.24 ms per 2-turn rollout
    # in a worker, 1.16-1.25 ms per 1,580-token rollout in the scheduler
    assert X.cpu_per_turn_s == pytest.approx(0.0011)
    assert X.scheduler_cpu_per_rollout_s == pytest.approx(0.0012 * 2010 / 1580)


def test_balanced_split_equalises_the_two_rates():
    per_inf = 1 / (800 / X.inference_peak_tokens_per_s + (1000 + 3 * 70) / X.prefill_tokens_per_s)
    per_train = X.trainer_tokens_per_s_per_gpu / 2010
    for gpus in (8, 64, 1024):
        n = balanced_split(gpus, X)
        assert n == max(1, round(gpus * per_train / (per_inf + per_train)))
    assert balanced_split(2, X) == 1


def test_workers_for_a_rate():
    assert workers_for(1000.0, X) == math.ceil(1000 * 4 * 0.0011 / 0.7)  # 7 cores at 70%
    assert workers_for(0.1, X) == 1


def test_plan_config_counts_and_weights():
    c = plan_config(64, 6, 2, 3, X)
    assert c.inference.replicas == 6 and c.trainer.gpus == 58
    assert c.trainer.tokens_per_s == pytest.approx(58 * X.trainer_tokens_per_s_per_gpu)
    assert c.pipeline.batch_size == 512 and c.pipeline.max_async_level == 2
    assert c.weights.publish_s == pytest.approx(8.0 / 25.0)
    assert c.control_plane.workers == 3 and c.control_plane.cpu_per_turn_s == pytest.approx(0.0011)
    assert c.control_plane.scheduler_cpu_per_rollout_s == pytest.approx(0.0012 * 2010 / 1580)
    fs = plan_config(64, 6, 2, 3, X, transport="filesystem")
    assert fs.weights.load_s == pytest.approx(4.0) and fs.weights.transport == "filesystem"


def test_a_small_row_uses_every_gpu_and_keeps_the_trainer_busy():
    row = capacity_row(8, X)
    assert row.inference_gpus + row.trainer_gpus == 8
    assert row.result.gpus == 8
    assert row.max_async_level in (1, 2, 3)
    assert row.result.trainer_idle < 0.15
    # filesystem weights add the write to the trainer's step: never faster than broadcast
    assert row.filesystem_step_time_s > row.result.step_time_s


def test_a_row_bound_by_the_one_scheduler():
    # a scheduler at 0.2 ms per 402 tokens costs 1 s per 2,010-token rollout: 8 GPUs (64 rollouts a step, ~10/s
    # without it) train 1 rollout/s, a step is 64 s, the scheduler's core is full and the GPUs wait
    slow = CapacityInputs(scheduler_cpu_per_rollout_measured_s=0.2, scheduler_measured_rollout_tokens=402)
    assert slow.scheduler_cpu_per_rollout_s == pytest.approx(1.0)
    row = capacity_row(8, slow)
    assert row.result.rollouts_per_s == pytest.approx(1.0, rel=0.01)
    assert row.result.step_time_s == pytest.approx(64.0, rel=0.01)
    assert row.result.scheduler_busy == pytest.approx(1.0, rel=0.01)
    assert row.result.trainer_idle > 0.8
