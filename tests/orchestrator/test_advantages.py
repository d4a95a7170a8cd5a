"""Advantages on hand-worked groups."""

from __future__ import annotations

import pytest

from prime_rl.config.orchestrator import AdvantageConfig
from prime_rl.orchestrator.advantages import compute_advantages, get_advantage_fn, register_advantage
from prime_rl.registry import RegistryError


def test_grpo_hand_worked():
    # rewards 1, 0, 0.5, 0.5 -> mean 0.5 -> 0.5, -0.5, 0, 0
    assert compute_advantages([1, 0, 0.5, 0.5], [True] * 4, AdvantageConfig()) == [0.5, -0.5, 0.0, 0.0]


def test_grpo_std_normalize_hand_worked():
    # rewards 1, 0: mean 0.5, population std 0.5 -> +-1 (up to eps)
    a = compute_advantages([1.0, 0.0], [True, True], AdvantageConfig(std_normalize=True))
    assert a == pytest.approx([1.0, -1.0], abs=1e-5)
    # rewards 3, 1, 2: mean 2, std sqrt(2/3) = 0.8165 -> 1.2247, -1.2247, 0
    a = compute_advantages([3, 1, 2], [True] * 3, AdvantageConfig(std_normalize=True))
    assert a == pytest.approx([1.224744, -1.224744, 0.0], abs=1e-5)


def test_masked_members_excluded_from_baseline():
    # member 2 masked with reward 0 (a failed episode, never a real 0): baseline = mean(1, 0.5) = 0.75
    a = compute_advantages([1.0, 0.5, 0.0], [True, True, False], AdvantageConfig())
    assert a == [0.25, -0.25, 0.0]
    # std-normalized: std of (1, 0.5) = 0.25 -> +-1
    a = compute_advantages([1.0, 0.5, 0.0], [True, True, False], AdvantageConfig(std_normalize=True))
    assert a == pytest.approx([1.0, -1.0, 0.0], abs=1e-4)


def test_group_of_one_and_all_masked_give_zero():
    assert compute_advantages([0.9], [True], AdvantageConfig()) == [0.0]
    assert compute_advantages([0.9, 0.1], [True, False], AdvantageConfig()) == [0.0, 0.0]
    assert compute_advantages([0.9, 0.1], [False, False], AdvantageConfig(type="rloo")) == [0.0, 0.0]
    assert compute_advantages([0.3, 0.3, 0.3], [True] * 3, AdvantageConfig(std_normalize=True)) == [0.0] * 3


def test_rloo_hand_worked():
    # rewards 1, 0, 0.5: leave-one-out means 0.25, 0.75, 0.5 -> 0.75, -0.75, 0
    assert compute_advantages([1, 0, 0.5], [True] * 3, AdvantageConfig(type="rloo")) == [0.75, -0.75, 0.0]
    # with a masked member: others are (1, 0) -> 1 - 0 = 1, 0 - 1 = -1
    assert compute_advantages([1, 0, 0.7], [True, True, False], AdvantageConfig(type="rloo")) == [1.0, -1.0, 0.0]


def test_registry():
    register_advantage("const", lambda r, m, c: [1.0] * len(r))
    assert compute_advantages([0, 0], [True, False], AdvantageConfig(type="const")) == [1.0, 0.0]
    with pytest.raises(RegistryError, match="orchestrator.advantage.type = 'nope': unknown advantage estimator; choose one of: .*grpo, rloo"):
        get_advantage_fn("nope")
