"""Configuration of the sources of tasks: a train source (`[[orchestrator.train.source]]`: an environment, its share
of the stream and the settings of its own groups), an eval source (`[[orchestrator.eval.source]]`: an environment's
eval split and its own eval settings), and the sampling settings both use."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from prime_rl.config.advantage import AdvantageConfig
from prime_rl.config.base import BaseConfig
from prime_rl.config.recipes import LengthPenaltyConfig
from prime_rl.config.taskset import BuiltinEnvConfig, EnvConfig, env_kind


class SamplingConfig(BaseConfig):
    """How rollouts are sampled (the trainer's loss uses the same temperature's logprobs)."""

    temperature: float = Field(1.0, gt=0, description="Softmax temperature of sampling (> 0 for training).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the smallest set of tokens of this mass.")
    top_k: int = Field(-1, description="-1 disables top-k.")
    max_completion_tokens: int = Field(512, gt=0, description="Per model turn.")
    seed: int | None = Field(None, description="Base of a reproducible per-(rollout, turn) seed; None = unseeded.")


class EvalSamplingConfig(SamplingConfig):
    """Sampling of eval rollouts (temperature 0 allowed)."""

    temperature: float = Field(
        1.0, ge=0, description="0 = greedy decoding (argmax): a deterministic eval, as verl's validation default."
    )


class TaskSourceConfig(BaseConfig):
    """What every source of tasks has, train or eval: a name and an environment."""

    name: str = Field("default", description="Name in metrics, traces and eval results.")
    env: EnvConfig = Field(BuiltinEnvConfig(id="gridsim"), description="The environment.")

    @field_validator("env", mode="before")
    @classmethod
    def _env_kind(cls, value: Any) -> Any:
        return env_kind(value)


class SourceConfig(TaskSourceConfig):
    """One train source of tasks: an environment, its share of the stream, and the settings of its own groups."""

    ratio: float = Field(1.0, gt=0, description="Relative share of this source's tasks in the train stream.")
    length_penalty: LengthPenaltyConfig | None = Field(
        None, description="DAPO's overlong penalty on this source's train rewards, before advantages; None = off."
    )
    sampling: SamplingConfig | None = Field(
        None,
        description="Sampling of this source's train rollouts: the fields set here replace those of train.sampling; "
        "None = train.sampling. Train sources only.",
    )
    advantage: AdvantageConfig | None = Field(
        None,
        description="Advantage estimator of this source's groups: type is required, the fields set here replace those "
        "of orchestrator.advantage, the others are its (where this type has them); None = orchestrator.advantage. "
        "Train sources only.",
    )
    group_size: int | None = Field(
        None, gt=0, description="Rollouts per task of this source's groups; None = train.group_size. Train sources only."
    )


def unique_source_names(sources: list[SourceConfig] | None) -> list[SourceConfig] | None:
    """Refuse two sources with one `name`: metrics, eval rows and caches are keyed by it (docs/design.md invariant 8).
    Two sources that set no `name` are both 'default' (the name of an unnamed source, which a run of one source
    keeps in its metrics and checkpoints): the refusal says so and suggests names from their environments."""
    seen: dict[str, int] = {}
    for i, src in enumerate(sources or []):
        if src.name in seen:
            first = sources[seen[src.name]]
            unnamed = "name" not in first.model_fields_set and "name" not in src.model_fields_set
            if unnamed:
                ids = [_env_label(first.env, "a"), _env_label(src.env, "b")]
                ids = ids if ids[0] != ids[1] else [f"{ids[0]}-1", f"{ids[1]}-2"]
                raise ValueError(
                    f"entries {seen[src.name]} and {i} set no `name`, so both are named {src.name!r} (the name of an "
                    "unnamed source): per-source metrics, eval results and caches are keyed by the source's name, so "
                    f"they would mix; give each source its own `name` (e.g. name = \"{ids[0]}\" on entry "
                    f"{seen[src.name]} and name = \"{ids[1]}\" on entry {i})"
                )
            raise ValueError(
                f"entries {seen[src.name]} and {i} are both named {src.name!r}: per-source metrics, eval results and "
                "caches are keyed by the source's name, so they would mix; give each source its own `name`"
            )
        seen[src.name] = i
    return sources


def _env_label(env: Any, fallback: str) -> str:
    """A short name for a source from its environment: a built-in env's `id`, a taskset's `taskset.id`, else
    `fallback`."""
    label = getattr(env, "id", None) or getattr(getattr(env, "taskset", None), "id", None)
    return label if isinstance(label, str) and label else fallback


TRAIN_ONLY = {
    "ratio": "every eval source plays its own eval split on its own schedule; ratio shares the train stream only",
    "length_penalty": "eval reports the environment's rewards unshaped; set length_penalty on the "
                      "[[orchestrator.train.source]] entry instead",
    "advantage": "eval computes no advantages",
    "group_size": "eval plays rollouts_per_example rollouts per task (the source's, or eval.rollouts_per_example); "
                  "set that instead",
}
"""Train-source settings an eval source does not have, with why and the fix (`EvalConfig._train_only_keys`)."""


class EvalSourceConfig(TaskSourceConfig):
    """One eval source: an environment's eval split, with its own eval settings (unset: the `[orchestrator.eval]`
    values). Train-only settings (`TRAIN_ONLY`) are refused with their reason."""

    interval: int | None = Field(
        None, gt=0, description="Evaluate this source every N policy versions (and the final one); None = eval.interval."
    )
    num_examples: int | None = Field(None, gt=0, description="Eval tasks of this source; None = eval.num_examples.")
    rollouts_per_example: int | None = Field(
        None, gt=0, description="Rollouts per eval task of this source; None = eval.rollouts_per_example."
    )
    sampling: EvalSamplingConfig | None = Field(
        None,
        description="Sampling of this source's eval rollouts: the fields set here replace those of eval.sampling; "
        "None = eval.sampling.",
    )

    @field_validator("num_examples", mode="before")
    @classmethod
    def _all_examples(cls, value: Any) -> Any:
        return refuse_all_examples_spelling(value)


def refuse_all_examples_spelling(value: Any) -> Any:
    """`num_examples` as given, unless it is -1 (the reference prime-rl's "every eval task").

    Raises:
        ValueError: -1, naming the spelling here (leave num_examples unset)."""
    if isinstance(value, int | str) and str(value).strip() == "-1":
        raise ValueError("num_examples = -1 is the reference prime-rl's 'every eval task'; here leave num_examples "
                         "unset (None) to evaluate the whole eval split, or give a count > 0")
    return value


def unscheduled_eval_problem(ev: Any) -> str | None:
    """None unless a setting of the orchestrator's eval section `ev` (an `EvalConfig`) asks for an eval that never
    runs; else the refusal, naming the fields (backticked: the error names where they were set) and the fix.

    The orchestrator evaluates a source only at an interval, its own or `eval.interval` (the final step included:
    `orchestrator.eval.eval_due`), so without one a source is never evaluated, and settings that differ from their
    defaults while no source is evaluated do nothing. `evals` and sft's [eval] schedule otherwise and do not call
    this."""
    if ev.interval is not None:
        return None
    sources = ev.source or []
    for i, src in enumerate(sources):
        if src.interval is None and any(s.interval is not None for s in sources):
            timed = next(j for j, s in enumerate(sources) if s.interval is not None)
            return (f"eval.source.{i} ({src.name!r}) has no interval of its own and eval.interval is None, so it "
                    f"is never evaluated (`eval.source.{timed}.interval = {sources[timed].interval}` applies to "
                    f"that source only); set eval.source.{i}.interval = N, or eval.interval = N (every source "
                    "without its own), or remove the source")
    if any(s.interval is not None for s in sources):
        return None
    defaults = type(ev).model_fields
    named = [f"`eval.{f} = {getattr(ev, f)}`" for f in ("num_examples", "rollouts_per_example", "pass_threshold")
             if getattr(ev, f) != defaults[f].default]
    if ev.sampling != defaults["sampling"].default:
        named.append("eval.sampling")
    if sources:
        named.append(f"eval.source ({len(sources)} {'entry' if len(sources) == 1 else 'entries'})")
    if not named:
        return None
    return (f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} set, but eval.interval is None and no eval "
            "source sets an interval: the orchestrator evaluates only every eval.interval steps (the base policy "
            "and the final step included), so nothing is evaluated; set eval.interval = N (or "
            "eval.source.N.interval per source), or remove the eval settings (`prime-rl evals` scores a model, or "
            "a run's checkpoints, once)")
