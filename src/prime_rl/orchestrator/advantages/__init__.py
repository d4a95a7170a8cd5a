"""Group-relative advantage algorithms, one module each, looked up by name (`[orchestrator.advantage] type`).

An algorithm is a function `(rewards, mask, cfg) -> advantages`: `rewards` and `mask` have shape [G] (one per
rollout of a group; `mask[i]` true = rollout i is trainable, false = masked by its environment), the result has
shape [G] and is 0.0 at masked positions. Masked rollouts never enter the baseline (docs/design.md invariant 3). `cfg` is
the algorithm's own config class (`prime_rl.config.orchestrator`, chosen by `type`); `type = "custom"` loads
`cfg.import_path`.
"""

from __future__ import annotations

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
