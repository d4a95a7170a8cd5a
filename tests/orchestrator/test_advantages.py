"""Advantages on hand-worked groups."""

from __future__ import annotations

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.orchestrator import (
    CustomAdvantageConfig,
    GRPOAdvantageConfig,
    MaxRLAdvantageConfig,
    OrchestratorConfig,
    RLOOAdvantageConfig,
)
from prime_rl.orchestrator.advantages import compute_advantages, get_advantage_fn, register_advantage
from prime_rl.registry import RegistryError


def test_grpo_hand_worked():
    # rewards 1, 0, 0.5, 0.5 -> mean 0.5 -> 0.5, -0.5, 0, 0
    assert compute_advantages([1, 0, 0.5, 0.5], [True] * 4, GRPOAdvantageConfig()) == [0.5, -0.5, 0.0, 0.0]


def test_grpo_std_normalize_hand_worked():
    # rewards 1, 0: mean 0.5, population std 0.5 -> +-1 (up to eps)
    a = compute_advantages([1.0, 0.0], [True, True], GRPOAdvantageConfig(std_normalize=True))
    assert a == pytest.approx([1.0, -1.0], abs=1e-5)
    # rewards 3, 1, 2: mean 2, std sqrt(2/3) = 0.8165 -> 1.2247, -1.2247, 0
    a = compute_advantages([3, 1, 2], [True] * 3, GRPOAdvantageConfig(std_normalize=True))
    assert a == pytest.approx([1.224744, -1.224744, 0.0], abs=1e-5)


def test_masked_members_excluded_from_baseline():
    # member 2 masked with reward 0 (a failed episode, never a real 0): baseline = mean(1, 0.5) = 0.75
    a = compute_advantages([1.0, 0.5, 0.0], [True, True, False], GRPOAdvantageConfig())
    assert a == [0.25, -0.25, 0.0]
    # std-normalized: std of (1, 0.5) = 0.25 -> +-1
    a = compute_advantages([1.0, 0.5, 0.0], [True, True, False], GRPOAdvantageConfig(std_normalize=True))
    assert a == pytest.approx([1.0, -1.0, 0.0], abs=1e-4)


def test_group_of_one_and_all_masked_give_zero():
    assert compute_advantages([0.9], [True], GRPOAdvantageConfig()) == [0.0]
    assert compute_advantages([0.9, 0.1], [True, False], GRPOAdvantageConfig()) == [0.0, 0.0]
    assert compute_advantages([0.9, 0.1], [False, False], RLOOAdvantageConfig()) == [0.0, 0.0]
    assert compute_advantages([0.3, 0.3, 0.3], [True] * 3, GRPOAdvantageConfig(std_normalize=True)) == [0.0] * 3


def test_rloo_hand_worked():
    # rewards 1, 0, 0.5: leave-one-out means 0.25, 0.75, 0.5 -> 0.75, -0.75, 0
    assert compute_advantages([1, 0, 0.5], [True] * 3, RLOOAdvantageConfig()) == [0.75, -0.75, 0.0]
    # with a masked member: others are (1, 0) -> 1 - 0 = 1, 0 - 1 = -1
    assert compute_advantages([1, 0, 0.7], [True, True, False], RLOOAdvantageConfig()) == [1.0, -1.0, 0.0]


def const_one(rewards, mask, cfg):
    """A custom advantage for the test: `cfg.kwargs["value"]` for everyone."""
    return [float(cfg.kwargs["value"])] * len(rewards)


def test_maxrl_hand_worked():
    # 0/1 rewards 1, 0, 0, 0: success rate 1/4 -> (1 - 1/4) / (1/4) = 3 and -1 (the MaxRL estimator: sum over
    # successes of grad log pi / #successes, minus the mean over all samples)
    assert compute_advantages([1, 0, 0, 0], [True] * 4, MaxRLAdvantageConfig()) == pytest.approx([3.0, -1.0, -1.0, -1.0])
    # rewards 0.9, 0.5 (masked 0.1): mean 0.7 -> 0.2/0.7, -0.2/0.7
    assert compute_advantages([0.9, 0.5, 0.1], [True, True, False], MaxRLAdvantageConfig()) == pytest.approx(
        [0.2 / 0.7, -0.2 / 0.7, 0.0]
    )
    assert compute_advantages([0, 0, 0], [True] * 3, MaxRLAdvantageConfig()) == [0.0] * 3  # no success: no signal


def test_registry_and_custom():
    register_advantage("rloo", "prime_rl.orchestrator.advantages.rloo:rloo_advantages")
    cfg = CustomAdvantageConfig(import_path=f"{__name__}:const_one", kwargs={"value": 2})
    assert compute_advantages([0, 0], [True, False], cfg) == [2.0, 0.0]
    with pytest.raises(RegistryError, match="orchestrator.advantage.type = 'nope': unknown advantage estimator; choose one of: .*grpo, maxrl, rloo"):
        get_advantage_fn("nope")


def test_advantage_type_chooses_the_config_class():
    cfg = parse_config(OrchestratorConfig, ["--advantage.std-normalize", "true"])
    assert cfg.advantage == GRPOAdvantageConfig(std_normalize=True)
    assert parse_config(OrchestratorConfig, ["--advantage.type", "rloo"]).advantage == RLOOAdvantageConfig()
    with pytest.raises(ConfigError, match="std_normalize"):  # rloo has no std_normalize: an error, not ignored
        parse_config(OrchestratorConfig, ["--advantage.type", "rloo", "--advantage.std-normalize", "true"])
    old = parse_config(OrchestratorConfig, ["--advantage.type", "pkg.mod:fn"]).advantage
    assert old == CustomAdvantageConfig(import_path="pkg.mod:fn")
    assert parse_config(OrchestratorConfig, ["--advantage.type", "maxrl", "--advantage.filter-zero", "true"]).advantage \
        == MaxRLAdvantageConfig(filter_zero=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimators_match_an_independent_float64_computation(seed):
    """GRPO (both forms), RLOO and MaxRL against numpy float64 on random groups with masked members and rewards
    up to the default bound (1e6)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    r = rng.uniform(-1e6, 1e6, size=8)
    r[0] = 0.25
    m = np.ones(8, bool)
    m[[2, 5]] = False
    v = r[m]
    mean, std = v.mean(), v.std()
    want = {
        "grpo": np.where(m, r - mean, 0.0),
        "grpo-std": np.where(m, (r - mean) / (std + 1e-6), 0.0),
        "rloo": np.where(m, r - (v.sum() - r) / (len(v) - 1), 0.0),
    }
    cfgs = {"grpo": GRPOAdvantageConfig(), "grpo-std": GRPOAdvantageConfig(std_normalize=True),
            "rloo": RLOOAdvantageConfig()}  # fmt: skip
    for name, cfg in cfgs.items():
        got = compute_advantages(list(r), list(m), cfg)
        assert got == pytest.approx(list(want[name]), rel=1e-12, abs=1e-9), name
    pos = np.abs(r)
    got = compute_advantages(list(pos), list(m), MaxRLAdvantageConfig())
    want_maxrl = np.where(m, (pos - pos[m].mean()) / pos[m].mean(), 0.0)
    assert got == pytest.approx(list(want_maxrl), rel=1e-12)


def test_estimators_do_not_overflow_on_huge_rewards():
    """Rewards near float64's limit: the group mean of four 1e308 is 1e308 (a plain sum overflows to inf), and
    GRPO without std_normalize never computes the std (its square overflowed: OverflowError)."""
    big = [1e308] * 4
    assert compute_advantages(big, [True] * 4, GRPOAdvantageConfig()) == [0.0] * 4
    assert compute_advantages(big, [True] * 4, RLOOAdvantageConfig()) == [0.0] * 4
    # one 1e308 among small rewards: mean 2.5e307, advantages finite
    a = compute_advantages([1e308, 0.0, 0.0, 0.0], [True] * 4, GRPOAdvantageConfig())
    assert a == pytest.approx([7.5e307, -2.5e307, -2.5e307, -2.5e307], rel=1e-15)
    a = compute_advantages([1e308, 0.0, 0.0, 0.0], [True] * 4, GRPOAdvantageConfig(std_normalize=True))
    assert a == pytest.approx([3 ** 0.5, -(3 ** -0.5), -(3 ** -0.5), -(3 ** -0.5)], rel=1e-12)
