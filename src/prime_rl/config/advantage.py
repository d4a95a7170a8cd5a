"""The group-relative advantage of `[orchestrator.advantage]` (and of a train source's `advantage`): a tagged union
chosen by `type`, with the settings every estimator shares (`filter_zero`, `mask_truncated`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from prime_rl.config.base import BaseConfig


class _AdvantageBase(BaseConfig):
    filter_zero: bool = Field(False, description="Drop groups whose advantages are all zero.")
    mask_truncated: bool = Field(
        False,
        description="Leave truncated rollouts (cut at max_completion_tokens or seq_len) out of the loss; their "
        "rewards still count in their group's baseline (DAPO's overlong filtering, arXiv:2503.14476; TRL's "
        "mask_truncated_completions).",
    )


class GRPOAdvantageConfig(_AdvantageBase):
    """`type = "grpo"` (default): reward minus the mean of the group's unmasked members (Dr. GRPO, Liu et al. 2025,
    arXiv:2503.20783); with `std_normalize`, divided by their std as in GRPO (Shao et al. 2024, arXiv:2402.03300)."""

    type: Literal["grpo"] = Field("grpo", description="Group mean baseline (Dr. GRPO / GRPO).")
    std_normalize: bool = Field(False, description="Divide by the group's reward std (original GRPO).")


class RLOOAdvantageConfig(_AdvantageBase):
    """`type = "rloo"`: reward minus the mean of the other unmasked members (Ahmadian et al. 2024, arXiv:2402.14740)."""

    type: Literal["rloo"] = Field("rloo", description="Leave-one-out baseline.")


class MaxRLAdvantageConfig(_AdvantageBase):
    """`type = "maxrl"`: (reward - group mean) / group mean, the maximum-likelihood estimator of MaxRL (Tajwar et al.
    2026, arXiv:2602.02710) for rewards in [0, 1]: weights a task by the inverse of its success rate."""

    type: Literal["maxrl"] = Field("maxrl", description="Mean-normalised (maximum likelihood) estimator.")


class CustomAdvantageConfig(_AdvantageBase):
    """`type = "custom"`: `fn(rewards, mask, cfg) -> advantages` of your own (`prime_rl.orchestrator.advantages`);
    it reads its settings from `cfg.kwargs`."""

    type: Literal["custom"] = Field("custom", description="An advantage function of your own.")
    import_path: str = Field(
        description="`package.module:function` of the advantage function, or a name given to `register_advantage`."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Settings passed as `cfg.kwargs`.")


AdvantageConfig = Annotated[
    GRPOAdvantageConfig | RLOOAdvantageConfig | MaxRLAdvantageConfig | CustomAdvantageConfig,
    Field(discriminator="type"),
]
"""The group-relative advantage, chosen by `type`: `grpo` (default), `rloo`, `maxrl` or `custom`."""


def legacy_advantage_type(value: Any) -> Any:
    """`type = "package.module:function"` (the old spelling) means `type = "custom"` with that `import_path`."""
    if isinstance(value, dict) and isinstance(value.get("type"), str) and ":" in value["type"]:
        return {**value, "type": "custom", "import_path": value["type"]}
    return value
