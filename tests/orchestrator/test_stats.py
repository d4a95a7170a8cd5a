"""Step metrics: the learning-signal diagnostics on a hand-worked batch."""

from __future__ import annotations

import pytest

from prime_rl.envs.base import Task
from prime_rl.orchestrator.scheduler import CutBatch
from prime_rl.orchestrator.step_metrics import step_metrics
from prime_rl.orchestrator.types import Rollout


def _r(gid: int, reward: float, adv: float, masked: bool = False) -> Rollout:
    return Rollout(task=Task(f"t{gid}", "train", gid, []), source="s", group_id=gid, reward=reward, advantage=adv,
                   masked=masked)  # fmt: skip


def test_advantage_size_and_zero_spread_groups():
    # group 0: rewards 1, 0 -> +-0.5; group 1: equal rewards -> 0, 0; group 2: one masked, one left -> 0 (no baseline)
    rs = [_r(0, 1.0, 0.5), _r(0, 0.0, -0.5), _r(1, 0.3, 0.0), _r(1, 0.3, 0.0), _r(2, 0.9, 0.0), _r(2, 0.0, 0.0, True)]
    m = step_metrics(CutBatch(step=1, rollouts=rs, dropped_stale_groups=0, filtered_groups=0, max_off_policy=0,
                              wait_s=0.0), 1.0, 0)  # fmt: skip
    assert m["adv_abs_mean"] == pytest.approx((0.5 + 0.5) / 5)  # over the 5 unmasked rollouts
    assert m["zero_spread_groups_pct"] == pytest.approx(100 * 2 / 3)
