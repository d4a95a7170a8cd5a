"""GRPO advantages (Shao et al. 2024, arXiv:2402.03300, eq. 3; Dr. GRPO, Liu et al. 2025, arXiv:2503.20783).

    A_i = r_i - mean_{j trainable}(r_j)                       (default, Dr. GRPO: no std division)
    A_i = (r_i - mean) / (std + eps)   if std_normalize         (original GRPO; population std)

over the trainable members only. A group with fewer than two trainable members has no baseline: all zeros.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from prime_rl.config.orchestrator import GRPOAdvantageConfig

EPS = 1e-6


def grpo_advantages(rewards: Sequence[float], mask: Sequence[bool], cfg: GRPOAdvantageConfig) -> list[float]:
    """Shape [G] -> [G]; 0.0 for masked members."""
    vals = [float(r) for r, m in zip(rewards, mask, strict=True) if m]
    if len(vals) < 2:
        return [0.0] * len(rewards)
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    out = []
    for r, m in zip(rewards, mask, strict=True):
        if not m:
            out.append(0.0)
            continue
        a = float(r) - mean
        if cfg.std_normalize:
            a = a / (std + EPS)
        out.append(a)
    return out
