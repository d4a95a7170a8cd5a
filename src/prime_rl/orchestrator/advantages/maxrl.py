"""MaxRL advantages (Tajwar et al. 2026, "Maximum Likelihood Reinforcement Learning", arXiv:2602.02710).

    A_i = (r_i - mean) / mean          over the trainable members (k >= 2), rewards in [0, 1]

For 0/1 rewards this is the paper's estimator of grad log p(success) = grad p / p: the mean-centred policy gradient
divided by the group's success rate, so a hard task (few successes) weighs more than an easy one. A group with
fewer than two trainable members, or whose mean reward is 0 (no success: no likelihood to raise), gets zeros.
Computed in float64 with an overflow-safe mean.
"""

from __future__ import annotations

from collections.abc import Sequence

from prime_rl.config.orchestrator import MaxRLAdvantageConfig
from prime_rl.orchestrator.advantages import group_mean, trainable_rewards


def maxrl_advantages(rewards: Sequence[float], mask: Sequence[bool], cfg: MaxRLAdvantageConfig) -> list[float]:
    """Shape [G] -> [G]; 0.0 for masked members."""
    vals = trainable_rewards(rewards, mask)
    if len(vals) < 2:
        return [0.0] * len(rewards)
    mean = group_mean(vals)
    if mean <= 0.0:
        return [0.0] * len(rewards)
    return [(float(r) - mean) / mean if m else 0.0 for r, m in zip(rewards, mask, strict=True)]
