"""Admission recipes: the signal gate (a `GroupFilter` the scheduler also uses to refill a step) and the length
penalty (reward shaping before advantages).

- Gate (`[orchestrator.gate]`): a group is rejected when its unmasked rollouts all have one reward
  (`reject_uniform`) or its largest |advantage| lies outside `advantage_range`. The scheduler samples a replacement
  for each rejected group, up to `max_resample_factor` times the step's rollouts (`resample_budget`); this is DAPO's
  dynamic sampling (Yu et al. 2025, arXiv:2503.14476, section 3.2). With `keep_for_kl` a group whose advantages are
  all 0 is admitted: the trainer's reference-KL term still has a gradient on it.
- Length penalty (`length_penalty` of a train source): DAPO's overlong reward shaping (arXiv:2503.14476, eq. 13) on
  the rollout's sampled tokens L, the stop token that ends each finished turn included (DAPO's response length):
  `-coef * min(1, max(0, L - (L_max - L_cache)) / L_cache)`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from prime_rl.config.orchestrator import AdvantageConfig
from prime_rl.config.recipes import GateConfig, LengthPenaltyConfig
from prime_rl.orchestrator.types import Rollout


def make_gate(cfg: GateConfig):
    """The gate as a `GroupFilter` `(group with advantages, advantage cfg) -> reason | None` (docs/extending.md)."""

    def gate(group: Sequence[Rollout], _adv: AdvantageConfig) -> str | None:
        ok = [r for r in group if not r.masked]
        if not ok:
            return None  # nothing trains on it either way; the masked rollouts keep their own reasons
        all_zero = all(r.advantage == 0.0 for r in ok)
        if cfg.keep_for_kl and all_zero:
            return None
        if cfg.reject_uniform and len({r.reward for r in ok}) == 1:
            return f"gate: every reward is {ok[0].reward:g}"
        if cfg.advantage_range is not None:
            low, high = cfg.advantage_range
            top = max(abs(r.advantage) for r in ok)
            if not low <= top <= high:
                return f"gate: max |advantage| {top:g} outside advantage_range [{low:g}, {high:g}]"
        return None

    gate.__name__ = "signal_gate"
    return gate


def resample_budget(cfg: GateConfig, batch_size: int) -> int:
    """Most rollouts one step examines, each examined group counted with its own size:
    ceil(max_resample_factor * batch_size). With one group size g this is ceil(max_resample_factor * batch_size / g)
    groups."""
    return math.ceil(cfg.max_resample_factor * batch_size - 1e-9)


def length_penalty(num_tokens: int, cfg: LengthPenaltyConfig) -> float:
    """DAPO's overlong penalty for a rollout of `num_tokens` sampled tokens (<= 0; see the module docstring)."""
    over = max(0, num_tokens - (cfg.max_tokens - cfg.cache_tokens))
    return -cfg.coef * min(1.0, over / cfg.cache_tokens)


def shape_rewards(group: Sequence[Rollout], penalties: Mapping[str, LengthPenaltyConfig]) -> list[Rollout]:
    """Copies of `group`'s rollouts with the length penalty of their source added to the reward (masked rollouts
    and sources without a penalty unchanged). `env_metrics["length_penalty"]` records the amount."""
    out = []
    for rollout in group:
        cfg = penalties.get(rollout.source)
        if cfg is None or rollout.masked:
            out.append(rollout)
            continue
        penalty = length_penalty(rollout.num_loss_tokens, cfg)
        out.append(dataclasses.replace(rollout, reward=rollout.reward + penalty,
                                       env_metrics={**rollout.env_metrics, "length_penalty": penalty}))  # fmt: skip
    return out
