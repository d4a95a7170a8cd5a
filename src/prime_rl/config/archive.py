"""Configuration of the rollout archive (`orchestrator.archive`) and of its readers, `prime-rl rollouts` and
`prime-rl export-sft` (prime_rl.monitor.archive, prime_rl.monitor.export_sft)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig


class ArchiveConfig(BaseConfig):
    """`orchestrator.archive`: every train and eval rollout as gzip-compressed JSON lines under `archive/step_N/`
    (docs/monitoring.md, "Rollout archive")."""

    enabled: bool = Field(True, description="Write the archive.")
    logprobs: bool = Field(False, description="Also keep the inference logprob of every sampled token.")
    keep_last: int | None = Field(
        None, gt=0, description="Keep the archive of the last this many steps (older step folders are deleted); "
        "None = keep all.",
    )
    flush_rollouts: int = Field(
        256, gt=0, description="Rollouts per compressed member (one gzip member is appended and fsynced per this "
        "many rollouts, and at the end of each step's batch or eval).",
    )


class ArchiveFilterConfig(BaseConfig):
    """Which archived rollouts a reader takes (all filters combine with AND)."""

    run: Path = Field(description="Run directory (output_dir of rl or orchestrator).")
    min_step: int | None = Field(None, ge=0, description="First step (inclusive); None = from the first.")
    max_step: int | None = Field(None, ge=0, description="Last step (inclusive); None = to the last.")
    split: Literal["train", "eval", "all"] = Field("all", description="Train rollouts, eval rollouts or both.")
    source: list[str] = Field(default_factory=list, description="Only these sources (default: every source).")
    task_id: list[str] = Field(default_factory=list, description="Only these task ids (default: every task).")
    min_reward: float | None = Field(None, description="Only rollouts with reward >= this.")
    max_reward: float | None = Field(None, description="Only rollouts with reward <= this.")
    errors: bool = Field(False, description="Only masked rollouts (those with an error kind).")

    @model_validator(mode="after")
    def _ranges(self) -> ArchiveFilterConfig:
        if self.min_step is not None and self.max_step is not None and self.min_step > self.max_step:
            raise ValueError(f"min_step ({self.min_step}) is above max_step ({self.max_step})")
        if self.min_reward is not None and self.max_reward is not None and self.min_reward > self.max_reward:
            raise ValueError(f"min_reward ({self.min_reward}) is above max_reward ({self.max_reward})")
        return self


class RolloutsConfig(ArchiveFilterConfig):
    """`prime-rl rollouts RUN`: the archived rollouts of a run. `--list-steps`: steps with their train and eval counts;
    otherwise the rollouts that pass the filters, as text or JSON lines."""

    list_steps: bool = Field(False, description="Print the archived steps with rollout counts per split instead.")
    format: Literal["text", "json"] = Field("text", description="text = readable blocks; json = one record a line.")
    limit: int | None = Field(None, gt=0, description="Print at most this many rollouts.")
    tokens: bool = Field(False, description="With --format json: keep the token ids (and logprobs) of the samples.")


class ExportSFTConfig(ArchiveFilterConfig):
    """`prime-rl export-sft RUN OUT`: archived rollouts as SFT data (`sft`'s `data.path`): unmasked rollouts that
    pass the filters, deduplicated (same task, same completion), the best `top_k` per task."""

    out: Path = Field(description="Output file: .jsonl, or .parquet (needs pyarrow).")
    split: Literal["train", "eval", "all"] = Field("train", description="Train rollouts, eval rollouts or both.")
    top_k: int | None = Field(None, gt=0, description="Keep the highest-reward this many per task; None = all.")
