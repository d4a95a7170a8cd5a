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


def merged_advantage(glob: Any, own: Any) -> Any:
    """A train source's advantage config `own` over `[orchestrator.advantage]` (`glob`), as a source's `sampling`
    merges over `train.sampling`: `own.type` (always given) chooses the estimator; every other field `own` leaves
    unset is `glob`'s, where that estimator has the field (`filter_zero` and `mask_truncated` always, `std_normalize`
    between grpo configs, `import_path` and `kwargs` between custom ones). Returns a new config of `own`'s class."""
    cls = type(own)
    inherited = {key: value for key, value in glob.model_dump().items() if key in cls.model_fields and key != "type"}
    return cls(**(inherited | own.model_dump(exclude_unset=True) | {"type": own.type}))


def unused_global_advantage_problem(glob: Any, sources: list[Any]) -> str | None:
    """None unless fields set in `[orchestrator.advantage]` (`glob`) off their defaults act on no train source: every
    source sets its own `advantage`, and each either has an estimator without the field or holds another value of it
    (set on the source; `type`: no source plays the global estimator); else the refusal naming them (backticked: the
    error names where they were set) and the fix. A source whose merged value equals the global one counts as using
    it, so a resolved config (every field written, the sources merged) reads back."""
    if any(src.advantage is None for src in sources):
        return None
    unused = []
    for key in sorted(glob.model_fields_set):
        value = getattr(glob, key)
        if value == ("grpo" if key == "type" else type(glob).model_fields[key].default):  # the defaults act on none
            continue
        used = any(key in type(src.advantage).model_fields and getattr(src.advantage, key) == value for src in sources)
        if not used:
            unused.append(key)
    if not unused:
        return None
    shown = {key: getattr(glob, key) for key in unused}
    fields = ", ".join(f"`advantage.{key} = {str(value).lower() if isinstance(value, bool) else repr(value)}`"
                       for key, value in shown.items())  # fmt: skip
    return (f"{fields} {'acts' if len(unused) == 1 else 'act'} on no train source: every source sets its own "
            "advantage, which takes a global field only where it leaves the field unset and its estimator (its type) "
            f"has it; remove {', '.join(f'advantage.{key}' for key in unused)} from [orchestrator.advantage], or set "
            "the value on a source's advantage")
