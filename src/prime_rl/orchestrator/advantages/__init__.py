"""Group-relative advantage algorithms, one module each, looked up by name (`[orchestrator.advantage] type`).

An algorithm is a function `(rewards, mask, cfg) -> advantages`: `rewards` and `mask` have shape [G] (one per
rollout of a group; `mask[i]` true = rollout i is trainable, false = masked by its environment), the result has
shape [G] and is 0.0 at masked positions. Masked rollouts never enter the baseline (docs/design.md invariant 3). `cfg` is
the algorithm's own config class (`prime_rl.config.orchestrator`, chosen by `type`); `type = "custom"` loads
`cfg.import_path`.

The built-in algorithms work in float64 and are overflow-safe (`scaled_mean`, `scaled_std`): rewards anywhere in
float64's range give finite baselines (the rewards themselves are bounded earlier, at the one reward check,
`envs.base.reward_problem`). Whether an advantage fits the trainer's float32 is checked at admission
(`prime_rl.orchestrator.admission`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from prime_rl.config.orchestrator import AdvantageConfig, CustomAdvantageConfig
from prime_rl.registry import Registry

AdvantageFn = Callable[[Sequence[float], Sequence[bool], Any], list[float]]

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator", "orchestrator.advantage.type", {
    "grpo": "prime_rl.orchestrator.advantages.grpo:grpo_advantages",
    "rloo": "prime_rl.orchestrator.advantages.rloo:rloo_advantages",
    "maxrl": "prime_rl.orchestrator.advantages.maxrl:maxrl_advantages",
})


def trainable_rewards(rewards: Sequence[float], mask: Sequence[bool]) -> np.ndarray:
    """The rewards of the trainable members (`mask[i]` true), float64, shape [k]."""
    return np.array([float(r) for r, m in zip(rewards, mask, strict=True) if m], dtype=np.float64)


def scaled_mean(values: np.ndarray) -> float:
    """The mean of `values` (float64, [k], k >= 1) without overflow: computed on `values / max|values|` and scaled
    back, so four rewards of 1e308 average to 1e308 (a plain sum is inf)."""
    scale = float(np.max(np.abs(values)))
    if scale == 0.0:
        return 0.0
    return float(np.mean(values / scale)) * scale


def scaled_std(values: np.ndarray, mean: float) -> float:
    """The population std of `values` around `mean` (float64) without overflow in the squares (scaled like
    `scaled_mean`); inf only when the deviations themselves overflow float64."""
    dev = values - mean
    scale = float(np.max(np.abs(dev)))
    if scale == 0.0 or not np.isfinite(scale):
        return scale
    return float(np.sqrt(np.mean((dev / scale) ** 2))) * scale


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
