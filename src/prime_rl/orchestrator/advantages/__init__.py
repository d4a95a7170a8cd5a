"""Group-relative advantage algorithms, one module each, looked up by name (`[orchestrator.advantage] type`).

An algorithm is a function `(rewards, mask, cfg) -> advantages`: `rewards` and `mask` have shape [G] (one per
rollout of a group; `mask[i]` true = rollout i is trainable, false = masked by its environment), the result has
shape [G] and is 0.0 at masked positions. Masked rollouts never enter the baseline (docs/design.md invariant 3). `cfg` is
the algorithm's own config class (`prime_rl.config.orchestrator`, chosen by `type`); `type = "custom"` loads
`cfg.import_path`.

The built-in algorithms work in float64 and are overflow-safe (`group_mean`, `group_std`): rewards anywhere in
float64's range give finite baselines (the rewards themselves are bounded earlier, at the one reward check,
`envs.base.reward_problem`). Whether an advantage fits the trainer's float32 is checked at admission
(`prime_rl.orchestrator.admission`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from prime_rl.config.orchestrator import AdvantageConfig, CustomAdvantageConfig
from prime_rl.registry import Registry

AdvantageFn = Callable[[Sequence[float], Sequence[bool], Any], list[float]]

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator", "orchestrator.advantage.type", {
    "grpo": "prime_rl.orchestrator.advantages.grpo:grpo_advantages",
    "rloo": "prime_rl.orchestrator.advantages.rloo:rloo_advantages",
    "maxrl": "prime_rl.orchestrator.advantages.maxrl:maxrl_advantages",
})


def trainable_rewards(rewards: Sequence[float], mask: Sequence[bool]) -> list[float]:
    """The rewards of the trainable members (`mask[i]` true), as Python floats (float64), shape [k]."""
    return [float(r) for r, m in zip(rewards, mask, strict=True) if m]


def group_mean(values: Sequence[float]) -> float:
    """The mean of `values` (k >= 1 finite floats). The plain left-to-right sum / k; only when that sum overflows,
    the mean of `values / max|values|` scaled back, so four rewards of 1e308 average to 1e308 (a plain sum is inf)."""
    mean = sum(values) / len(values)
    if math.isfinite(mean):
        return mean
    scale = max(abs(v) for v in values)
    return sum(v / scale for v in values) / len(values) * scale


def group_std(values: Sequence[float], mean: float) -> float:
    """The population std of `values` around `mean`: the plain formula; only when its squares overflow, computed
    on deviations scaled by their largest (inf only when a deviation itself overflows float64)."""
    try:
        var = sum((v - mean) ** 2 for v in values) / len(values)
        if math.isfinite(var):
            return math.sqrt(var)
    except OverflowError:  # a float's ** raises instead of returning inf
        pass
    dev = [v - mean for v in values]
    scale = max(abs(d) for d in dev)
    if scale == 0.0 or not math.isfinite(scale):
        return scale
    return math.sqrt(sum((d / scale) ** 2 for d in dev) / len(dev)) * scale


def register_advantage(name: str, fn: str | AdvantageFn) -> None:
    """Register an algorithm under `name` (a callable or an import path `module:function`)."""
    ADVANTAGES.register(name, fn)


def get_advantage_fn(name: str) -> AdvantageFn:
    """The algorithm registered as `name`, or `module:function`.

    Raises:
        RegistryError: unknown name (lists the registered ones) or an import path that does not import.
    """
    return ADVANTAGES.get(name)


def compute_advantages(rewards: Sequence[float], mask: Sequence[bool], cfg: AdvantageConfig) -> list[float]:
    """Advantages of one group with the configured algorithm; checks shapes and zeroes masked members."""
    if len(rewards) != len(mask):
        raise ValueError(f"rewards ({len(rewards)}) and mask ({len(mask)}) differ in length")
    if isinstance(cfg, CustomAdvantageConfig):
        name = cfg.import_path
        fn = ADVANTAGES.get(name, field="orchestrator.advantage.import_path")
    else:
        name = cfg.type
        fn = get_advantage_fn(name)
    adv = fn(rewards, mask, cfg)
    if len(adv) != len(rewards):
        raise ValueError(f"advantage fn {name!r} returned {len(adv)} values for a group of {len(rewards)}")
    return [float(a) if m else 0.0 for a, m in zip(adv, mask, strict=True)]
