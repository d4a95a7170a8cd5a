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
