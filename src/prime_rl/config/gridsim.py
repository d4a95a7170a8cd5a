"""Configuration of the `gridsim` tools (`baseline`, `sft-data`, `show`, `pack-ercot`); `gridsim X` is
`prime-rl gridsim X`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from prime_rl.config.base import BaseConfig
from prime_rl.dates import iso_date

Split = Literal["train", "eval", "forward"]

class GridSimDataConfig(BaseConfig):
    """Which days GridSim plays (the `gridsim` environment's own arguments)."""

    data_dir: Path | None = Field(
        None, description="Folder of ERCOT DAMLZHBSPP_<year>.xlsx for other years (default: the packaged 2021-2024 days)."
    )
    synthetic: bool = Field(False, description="Seeded synthetic days instead of real ones.")
    seed: int = Field(0, description="Seed of the split draw.")
    num_train: int | Literal["all"] = Field(
        2000, description="Train split size, or `all` for every usable day off the eval dates (eval is always 200)."
    )
    forward_from: dt.date | None = Field(
        None, description="Forward-in-time split: train and eval from the days before this date (YYYY-MM-DD, e.g. "
        "2024-01-01), the `forward` split (200 days) from the days on or after it; unset: train and eval from every "
        "day."
    )
    train_from: dt.date | None = Field(
        None, description="The train split keeps only its days on or after this date (YYYY-MM-DD; drawn as without "
        "it, then cut: eval and forward unchanged)."
    )

    @field_validator("forward_from", "train_from", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        return iso_date(value)

    @field_validator("num_train")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if value != "all" and int(value) < 1:
            raise ValueError("give a positive integer or `all`")
        return value

    @model_validator(mode="after")
    def _one_data_source(self) -> GridSimDataConfig:
        if self.synthetic and self.data_dir is not None:
            raise ValueError("--data-dir and --synthetic both given: choose one")
        if getattr(self, "split", None) == "forward" and self.forward_from is None:  # the subclasses with a split
            raise ValueError("--split forward needs --forward-from DATE (e.g. --forward-from 2024-01-01)")
        if self.train_from and self.forward_from and self.train_from >= self.forward_from:
            raise ValueError(f"--train-from {self.train_from} is not before --forward-from {self.forward_from}: every "
                             "training day would be a forward day; choose an earlier --train-from")  # fmt: skip
        split = getattr(self, "split", "train")
        if self.train_from and split != "train":
            default = "" if "split" in self.model_fields_set else " (the default)"
            raise ValueError(f"--train-from cuts the train split only, and --split {split}{default} is the same "
                             "without it: drop --train-from, or use --split train")  # fmt: skip
        return self

    def env_args(self) -> dict:
        """Keyword arguments of `GridSimEnv`."""
        args = {"data_dir": self.data_dir, "synthetic": self.synthetic, "seed": self.seed,
                "num_train": None if self.num_train == "all" else self.num_train}  # fmt: skip
        if self.forward_from is not None:
            args["forward_from"] = self.forward_from.isoformat()
        if self.train_from is not None:
            args["train_from"] = self.train_from.isoformat()
        return args

    def data_label(self) -> str:
        """What the days are, for output lines: `synthetic`, `ercot-2021-2024 (packaged)` or the folder."""
        if self.synthetic:
            return "synthetic"
        return str(self.data_dir) if self.data_dir is not None else "ercot-2021-2024 (packaged)"


class GridSimBaselineConfig(GridSimDataConfig):
    """`gridsim baseline`: score a reference policy on a split; print the mean, write per-task scores."""

    policy: Literal["idle", "greedy", "optimal", "random"] = Field(
        "greedy", description="idle all day; greedy: charge in the 4 cheapest hours, sell in the 4 dearest; the "
        "optimum; random moves."
    )
    split: Split = Field("eval", description="Which split's tasks to score.")
    out: Path | None = Field(
        None, description="Per-task scores JSONL (default outputs/gridsim/baseline-POLICY-SPLIT-{synthetic|ercot}"
        ".jsonl; -from-DATE before .jsonl with --forward-from)."
    )


class GridSimDemosConfig(GridSimDataConfig):
    """`gridsim sft-data OUT`: demonstrations (optimal submit_schedule calls) as chat JSONL."""

    out: Path = Field(description="Output JSONL.")
    split: Split = Field("train", description="Which split's tasks to demonstrate.")


class GridSimShowConfig(GridSimDataConfig):
    """`gridsim show`: print one task's prompts and optimal schedule."""

    split: Split = Field("eval", description="Which split the task is in.")
    index: int = Field(0, description="Position of the task in the split.")


class GridSimPackConfig(BaseConfig):
    """`gridsim pack-ercot --data-dir DIR OUT`: the five hubs' prices of ERCOT's xlsx files as a compact .npz."""

    data_dir: Path = Field(description="Folder of ERCOT DAMLZHBSPP_<year>.xlsx.")
    out: Path = Field(description="Output .npz (the packaged file: src/prime_rl/envs/gridsim/ercot_data/).")
