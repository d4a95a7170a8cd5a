"""RLOO advantages (Ahmadian et al. 2024, arXiv:2402.14740): each member's baseline is the mean of the others.

    A_i = r_i - (1 / (k - 1)) * sum_{j != i, j trainable} r_j   over the k trainable members (k >= 2)

in float64; when the group's sum overflows, as the equal k / (k - 1) * (r_i - mean) with an overflow-safe mean.
Fewer than two trainable members: all zeros.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from prime_rl.config.orchestrator import RLOOAdvantageConfig
from prime_rl.orchestrator.advantages import group_mean, trainable_rewards


def rloo_advantages(rewards: Sequence[float], mask: Sequence[bool], cfg: RLOOAdvantageConfig) -> list[float]:
    """Shape [G] -> [G]; 0.0 for masked members."""
    vals = trainable_rewards(rewards, mask)
    num_trainable = len(vals)
    if num_trainable < 2:
        return [0.0] * len(rewards)
    total = sum(vals)
    if math.isfinite(total):
        return [float(r) - (total - float(r)) / (num_trainable - 1) if m else 0.0
                for r, m in zip(rewards, mask, strict=True)]  # fmt: skip
    mean = group_mean(vals)
    return [(float(r) - mean) * (num_trainable / (num_trainable - 1)) if m else 0.0
            for r, m in zip(rewards, mask, strict=True)]  # fmt: skip
