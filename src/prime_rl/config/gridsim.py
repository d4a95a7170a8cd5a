"""Configuration of the `gridsim` tools (`baseline`, `sft-data`, `show`); `gridsim X` is `prime-rl gridsim X`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from prime_rl.config.base import BaseConfig

Split = Literal["train", "eval"]


class GridSimDataConfig(BaseConfig):
    """Which days GridSim plays (the `gridsim` environment's own arguments)."""

    data_dir: Path | None = Field(None, description="Folder of ERCOT DAMLZHBSPP_<year>.xlsx (default: synthetic days).")
    seed: int = Field(0, description="Seed of the split draw.")
    num_train: int | Literal["all"] = Field(
        2000, description="Train split size, or `all` for every usable day off the eval dates (eval is always 200)."
    )

    @field_validator("num_train")
    @classmethod
    def _positive(cls, v: int | str) -> int | str:
        if v != "all" and int(v) < 1:
            raise ValueError("give a positive integer or `all`")
        return v

    def env_args(self) -> dict:
        """Keyword arguments of `GridSimEnv`."""
        return {"data_dir": self.data_dir, "seed": self.seed, "num_train": None if self.num_train == "all" else self.num_train}


class GridSimBaselineConfig(GridSimDataConfig):
    """`gridsim baseline`: score a reference policy on a split; print the mean, write per-task scores."""

    policy: Literal["idle", "greedy", "optimal", "random"] = "greedy"
    split: Split = "eval"
    out: Path | None = Field(
        None, description="Per-task scores JSONL (default outputs/gridsim/baseline-POLICY-SPLIT-{synthetic|ercot}.jsonl)."
    )


class GridSimDemosConfig(GridSimDataConfig):
    """`gridsim sft-data OUT`: demonstrations (optimal submit_schedule calls) as chat JSONL."""

    out: Path = Field(description="Output JSONL.")
    split: Split = "train"


class GridSimShowConfig(GridSimDataConfig):
    """`gridsim show`: print one task's prompts and optimal schedule."""

    split: Split = "eval"
    index: int = Field(0, description="Position of the task in the split.")
