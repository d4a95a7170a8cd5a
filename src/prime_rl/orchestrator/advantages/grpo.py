"""GRPO advantages (Shao et al. 2024, arXiv:2402.03300, eq. 3; Dr. GRPO, Liu et al. 2025, arXiv:2503.20783).

    A_i = r_i - mean_{j trainable}(r_j)                       (default, Dr. GRPO: no std division)
    A_i = (r_i - mean) / (std + eps)   if std_normalize         (original GRPO; population std)

over the trainable members only, in float64 (overflow-safe mean and std; the std is computed only with
`std_normalize`). A group with fewer than two trainable members has no baseline: all zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

from prime_rl.config.orchestrator import GRPOAdvantageConfig
from prime_rl.orchestrator.advantages import group_mean, group_std, trainable_rewards

EPS = 1e-6


def grpo_advantages(rewards: Sequence[float], mask: Sequence[bool], cfg: GRPOAdvantageConfig) -> list[float]:
    """Shape [G] -> [G]; 0.0 for masked members."""
    vals = trainable_rewards(rewards, mask)
    if len(vals) < 2:
        return [0.0] * len(rewards)
    mean = group_mean(vals)
    if not cfg.std_normalize:
        return [float(r) - mean if m else 0.0 for r, m in zip(rewards, mask, strict=True)]
    std = group_std(vals, mean)
    return [(float(r) - mean) / (std + EPS) if m else 0.0 for r, m in zip(rewards, mask, strict=True)]
