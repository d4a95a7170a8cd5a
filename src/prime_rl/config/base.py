"""Shared building blocks of every command's configuration (pydantic v2, extra keys forbidden)."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_config import BaseConfig as _LibBaseConfig

__all__ = [
    "BaseConfig",
    "ModelConfig",
    "LoRAConfig",
    "CheckpointConfig",
    "WandbConfig",
    "LogConfig",
    "DatasetSource",
]


NONE_TEXT = "None"
"""How files and flags written by hand set an optional field to None (`--x None`, `x = "None"`; the config library's
convention, which the reference's configs use). Only a field that admits None reads it so; elsewhere it is text."""

NULL_KEY = "_null"
"""The key under which a resolved config lists its section's fields that are None where their default is not (TOML
has no null): `_null = ["max_norm"]` in `[optim]`. No field can be named so (pydantic keeps `_` names private)."""


class BaseConfig(_LibBaseConfig):
    """Base of every prime-rl config: unknown keys are errors. A field that admits None is set to None by the text
    `"None"` (files and flags written by hand) or by naming it in its section's `_null` list (resolved configs,
    `loader.config_to_toml`); any other field keeps the text `"None"` as text. A boolean field takes a boolean (or
    the text true/false a flag gives), not other text or a number (`not_a_bool`).

    Raises:
        ValueError: `_null` is not a list of field names of this section that admit None; a boolean field is given
            text or a number.
    """

    @model_validator(mode="before")
    @classmethod
    def _none_str_to_none(cls, data: Any) -> Any:
        # Replaces the library's validator of this name (which turns "None" into None in every field, text fields
        # included); `config.upstream.upstream_problems` checks that the library still has it under this name.
        if not isinstance(data, dict):
            return data
        out = dict(data)
        nulls = out.pop(NULL_KEY, [])
        if not isinstance(nulls, list) or not all(isinstance(n, str) for n in nulls):
            raise ValueError(f"{NULL_KEY} = {nulls!r}: expected a list of field names of this section")
        for name in nulls:
            finfo = cls.model_fields.get(name)
            if finfo is None or not _admits_none(finfo.annotation):
                what = "no field of this section" if finfo is None else "a field that cannot be None"
                raise ValueError(f"{NULL_KEY} names {name!r}: {what}")
            out.setdefault(name, None)  # a value given for the field too (a later file, a flag) takes precedence
        for name, finfo in cls.model_fields.items():
            if out.get(name) == NONE_TEXT and _admits_none(finfo.annotation):
                out[name] = None
            if name in out and not_a_bool(finfo.annotation, out[name]):
                raise ValueError(f"{name} = {out[name]!r}: not a boolean; write {name} = true or {name} = false "
                                 "(TOML and JSON booleans are unquoted; a flag takes true or false)")  # fmt: skip
        return out


def _admits_none(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return (origin is typing.Union or origin is types.UnionType) and type(None) in typing.get_args(annotation)


def bool_field(annotation: Any) -> tuple[bool, bool]:
    """(whether `annotation` is `bool` or `bool | None`, whether it admits None)."""
    if annotation is bool:
        return True, False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner == [bool], len(inner) < len(typing.get_args(annotation))
    return False, False


def not_a_bool(annotation: Any, value: Any) -> bool:
    """Whether `value`, given for a field of type `annotation`, is something other than a boolean where a boolean is
    wanted: a number, or text other than true/false in any case (as flags reach some fields; `config.bools`
    refuses those too where a TOML file holds them) and `"None"` where None is allowed. False for a field that is
    not a boolean. pydantic's lax mode would read `"yes"`, `"on"`, `1` as true."""
    is_bool, optional = bool_field(annotation)
    if not is_bool or isinstance(value, bool) or (value is None and optional):
        return False
    if isinstance(value, str):
        return value.lower() not in ("true", "false") and not (optional and value == NONE_TEXT)
    return isinstance(value, int | float)  # a table or list is left to pydantic ("Input should be a valid boolean")


class LoRAConfig(BaseConfig):
    """LoRA adapters (peft). Only adapter weights train; see Hu et al. 2021, arXiv:2106.09685."""

    rank: int = Field(16, gt=0, description="LoRA rank r.")
    alpha: float = Field(32.0, gt=0, description="LoRA alpha; the update is scaled by alpha / rank.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="Module names (peft `target_modules`) that get adapters.",
    )


class ModelConfig(BaseConfig):
    """The policy model: a local Hugging Face directory (config.json, safetensors, tokenizer) or a hub id."""

    name: str = Field(
        "outputs/tiny-model",
        description="Local model folder, or a hub id (org/name) resolved once with huggingface_hub "
        "(HF_HUB_OFFLINE=1: the local cache only).",
    )
    chat_template: Path | None = Field(
        None,
        description="A Jinja chat template file replacing the model's own, in SFT, the renderer and vLLM alike "
        "(e.g. src/prime_rl/models/templates/chatml_tools.jinja: ChatML with Hermes tool calls).",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Compute dtype; auto = bfloat16 on GPU; on CPU bfloat16 for a model of hidden size >= 512 where "
        "native bf16 matmul measures >= 1.3x fp32 at start-up, else float32 (PRIME_RL_CPU_BF16=0: float32).",
    )
    trust_remote_code: bool = Field(
        False, description="Let transformers run Python code shipped with the model folder (custom architectures)."
    )


class CheckpointConfig(BaseConfig):
    """Checkpointing of trainer and orchestrator state for bit-exact resume."""

    interval: int | None = Field(None, gt=0, description="Save every N steps; None disables checkpoints.")
    keep_last: int | None = Field(2, gt=0, description="Keep this many newest checkpoints; None keeps all.")
    keep_interval: int | None = Field(
        None, gt=0, description="Also keep every checkpoint whose step is a multiple of this, besides the newest "
        "keep_last; None = none kept for their step.",
    )
    resume_step: int | None = Field(
        None, description="Resume from this step's checkpoint; -1 = newest complete one; None = start fresh."
    )
    resume_dir: Path | None = Field(
        None, description="Resume from another run's checkpoint folder (.../checkpoints/step_N): the run forks it "
        "into its own output_dir. Excludes resume_step.",
    )
    skip_optimizer: bool = Field(False, description="On resume, start AdamW's moments afresh (zero, step 0).")
    skip_scheduler: bool = Field(False, description="On resume, start the learning-rate schedule afresh (warmup again).")
    skip_progress: bool = Field(
        False, description="On resume, start counting steps at 1 again (weights, optimizer and schedule still load).",
    )
    skip_dataloader: bool = Field(
        False, description="Orchestrator: on resume, start the task stream afresh from `seed` (order, epochs, "
        "tasks drawn but not trained). The trainers' data order has no state to skip.",
    )

    @model_validator(mode="after")
    def _one_resume(self) -> CheckpointConfig:
        if self.resume_dir is not None:
            if self.resume_step is not None:
                raise ValueError("ckpt.resume_dir and ckpt.resume_step both set: the step is taken from resume_dir's "
                                 "name (.../checkpoints/step_N); unset one")
            if not re.fullmatch(r"step_\d+", Path(self.resume_dir).name):
                raise ValueError(f"ckpt.resume_dir = {str(self.resume_dir)!r}: not a checkpoint folder (its name must "
                                 "be step_N, e.g. outputs/run-a/checkpoints/step_50)")
        return self

    @property
    def resuming(self) -> bool:
        """Whether a checkpoint is loaded (resume_step or resume_dir set)."""
        return self.resume_step is not None or self.resume_dir is not None

    @property
    def skips(self) -> list[str]:
        """The skip_* flags set, by name."""
        return [n for n in ("skip_optimizer", "skip_scheduler", "skip_progress", "skip_dataloader") if getattr(self, n)]


class WandbConfig(BaseConfig):
    """Optional Weights & Biases logging (metrics.jsonl is always written)."""

    project: str = Field("prime-rl", description="W&B project the run is logged to.")
    name: str | None = Field(None, description="W&B run name; default: the run directory's name.")
    offline: bool = Field(False, description="Log to a local offline run (wandb/ in the run directory), no network.")


class DatasetSource(BaseConfig):
    """Rows from a Hugging Face dataset (`prime_rl.hf_data`): `name` for `datasets.load_dataset(name, subset,
    split=...)`, and `columns` to rename the dataset's columns to the ones prime-rl reads."""

    name: str | None = Field(
        None, description="Hugging Face dataset: a hub id (where the hub is reachable) or a local dataset folder."
    )
    subset: str | None = Field(None, description="Dataset configuration (`load_dataset(name, subset)`).")
    split: str = Field("train", description="Split to read (also of a local dataset folder).")
    columns: dict[str, str] = Field(
        default_factory=dict, description="{our column: the dataset's column}, e.g. {messages = \"conversations\"}."
    )


class LogConfig(BaseConfig):
    """Console and log-file verbosity."""

    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Lowest level printed and logged.")
