"""RLOO advantages (Ahmadian et al. 2024, arXiv:2402.14740): each member's baseline is the mean of the others.

    A_i = r_i - (1 / (k - 1)) * sum_{j != i, j trainable} r_j   over the k trainable members (k >= 2)

computed as k / (k - 1) * (r_i - mean), in float64 with an overflow-safe mean. Fewer than two trainable members:
all zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

from prime_rl.config.orchestrator import RLOOAdvantageConfig
from prime_rl.orchestrator.advantages import scaled_mean, trainable_rewards


def rloo_advantages(rewards: Sequence[float], mask: Sequence[bool], cfg: RLOOAdvantageConfig) -> list[float]:
    """Shape [G] -> [G]; 0.0 for masked members."""
    vals = trainable_rewards(rewards, mask)
    k = len(vals)
    if k < 2:
        return [0.0] * len(rewards)
    mean = scaled_mean(vals)
    return [(float(r) - mean) * (k / (k - 1)) if m else 0.0 for r, m in zip(rewards, mask, strict=True)]
