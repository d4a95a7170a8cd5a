"""SFT-only settings: per-role loss masks (`data.loss_mask`), weighted dataset mixing (`[[data.source]]`) and the
validation split (`[val]`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig, DatasetSource
from prime_rl.hf_data import BUILDERS, DIRECT


def unread_local_fields(source: DatasetSource, path: Path | None) -> str | None:
    """Why `source`'s `subset` or `split` would go unread with the local `path`, and the fix; None when both are
    read (or unset). A local path never reads `subset` (only `load_dataset(name, subset)` does: a local dataset
    folder given as `name` reads it); a single file (`.jsonl`, `.parquet`, ...) is read whole, so a `split` other
    than "train" is unread; a folder (`save_to_disk`, or data files) reads `split`."""
    if path is None:
        return None
    one_file = path.suffix in (*DIRECT, *BUILDERS)
    if source.subset is not None:
        fix = "remove subset (a file holds one dataset)" if one_file else (
            f"remove subset, or give the dataset folder as name = {json.dumps(str(path))} instead of path (a folder "
            "given as name reads subset)")  # fmt: skip
        return (f"`subset = {json.dumps(source.subset)}` is read only with a dataset `name` (`load_dataset(name, "
                f"subset)`); path = {json.dumps(str(path))} is read without it: {fix}")  # fmt: skip
    if source.split != "train" and one_file:
        return (f"`split = {json.dumps(source.split)}` is not read: path = {json.dumps(str(path))} is one file, "
                f"read whole; split picks a split of a dataset folder (`save_to_disk`, or a folder of data files) "
                f"or of a dataset name: remove split, or point path at the file that holds the {source.split} rows")  # fmt: skip
    return None


class LossMaskConfig(BaseConfig):
    """Which messages' tokens carry loss (the reference's `data.loss_mask`). An assistant message contributes the
    tokens the model emits itself (content, reasoning, tool calls, its end-of-turn token); any other message
    contributes every token the renderer attributes to it (role header, content, end-of-turn). The first token of
    a conversation never carries loss (nothing predicts it)."""

    system: bool = Field(False, description="System messages carry loss.")
    user: bool = Field(False, description="User messages carry loss.")
    assistant: bool = Field(True, description="Assistant messages carry loss (their sampled tokens).")
    tool: bool = Field(False, description="Tool-result messages carry loss.")

    def roles(self) -> frozenset[str]:
        """The roles whose tokens carry loss."""
        return frozenset(r for r in ("system", "user", "assistant", "tool") if getattr(self, r))

    @model_validator(mode="after")
    def _some_role(self) -> LossMaskConfig:
        if not self.roles():
            raise ValueError("loss_mask.system, loss_mask.user, loss_mask.assistant and loss_mask.tool are all false: "
                             "no token would carry loss, so there is nothing to train on; set loss_mask.assistant = "
                             "true (the default), or another role")  # fmt: skip
        return self


class SFTSourceConfig(DatasetSource):
    """One dataset of a mixture: rows from `path` or a Hugging Face dataset `name`, drawn with relative `weight`."""

    path: Path | None = Field(None, description="Local rows (.jsonl, .parquet, ...); unset when `name` is given.")
    weight: float = Field(
        1.0, gt=0, description="Relative probability of drawing a sample from this source (weights are normalised)."
    )
    label: str | None = Field(
        None, description="Name in metrics (`source/<label>/...`); default: the file's stem or the dataset name."
    )

    @model_validator(mode="after")
    def _one_source(self) -> SFTSourceConfig:
        if (self.path is None) == (self.name is None):
            raise ValueError("each [[data.source]] needs exactly one of path (a local file) or name (a HF dataset)")
        if (problem := unread_local_fields(self, self.path)) is not None:
            raise ValueError(problem)
        return self

    def resolved_label(self) -> str:
        """`label`, else the file's stem, else the dataset name."""
        if self.label:
            return self.label
        return self.path.stem if self.path is not None else str(self.name)


class SFTValDataConfig(DatasetSource):
    """Validation rows from a file or a Hugging Face dataset (same row formats as `data`)."""

    path: Path | None = Field(None, description="Local rows (.jsonl, .parquet, ...); unset when `name` is given.")

    @model_validator(mode="after")
    def _read_fields(self) -> SFTValDataConfig:
        if (problem := unread_local_fields(self, self.path)) is not None:
            raise ValueError(problem)
        return self


class SFTValConfig(BaseConfig):
    """Validation loss on held-out conversations, without gradients, in a fixed order (deterministic): the NLL of
    the loss tokens (same `data.loss_mask`) summed over the first `num_batches` batches of `batch_size`
    conversations, divided by their loss-token count. Reported as `val/loss` and `val/perplexity`."""

    data: SFTValDataConfig | None = Field(None, description="Validation rows; unset: hold out `fraction` of data.")
    fraction: float | None = Field(
        None, gt=0, lt=1,
        description="Hold out this fraction of the training rows (of each [[data.source]]), chosen by a "
        "permutation seeded with `seed`; those rows are never trained on.",
    )  # fmt: skip
    interval: int = Field(50, gt=0, description="Validate every N optimizer steps (and at the last step).")
    eval_on_start: bool = Field(False, description="Also validate the initial weights (logged as step 0; not on resume).")
    num_batches: int | None = Field(None, gt=0, description="Batches per validation; None: the whole split.")
    batch_size: int | None = Field(None, gt=0, description="Conversations per validation batch; None: data.batch_size.")

    def short_split_warning(self, num_rows: int, data_batch_size: int, num_training_rows: int,
                            where: Callable[[str], str] = lambda field: "") -> str | None:  # fmt: skip
        """A warning when `num_batches` asks for more conversations than the validation split's `num_rows` give:
        validation reads the whole split, fewer batches than asked. None otherwise. The one check of `sft` at start
        (`trainer.sft.train`) and of `sft --dry-run` (`launcher.sft_preflight.val_split_warnings`).

        `num_training_rows`: the rows `val.fraction` was taken from (all sources, before holding out), for the
        message; `where(field)`: where a field was set (`config.origin.where_set`)."""
        batch_size = self.batch_size or data_batch_size
        full = -(-num_rows // batch_size)  # the batches the split fills (the last one may be partial)
        if self.num_batches is None or self.num_batches <= full:
            return None
        source = ("val.data" if self.data is not None else
                  f"val.fraction = {self.fraction}{where('val.fraction')} of {num_training_rows} training rows")
        size_field = "val.batch_size" if self.batch_size else "data.batch_size"
        return (f"val.num_batches = {self.num_batches}{where('val.num_batches')} asks for {self.num_batches} "
                f"batches of {batch_size} conversations ({size_field}), {self.num_batches * batch_size} in all, but "
                f"the validation split holds {num_rows} ({source}): each validation reads those {num_rows} "
                f"({full} batch{'es' if full > 1 else ''}), fewer than asked; lower val.num_batches to {full}, or leave "
                f"it unset (the whole split)")  # fmt: skip

    @model_validator(mode="after")
    def _one_split(self) -> SFTValConfig:
        if (self.data is None) == (self.fraction is None):
            sets = "neither val.data nor" if self.data is None else "both val.data and"
            unset = ("; on the command line `--val.data None` unsets a val.data that a file sets (`--val.fraction None` "
                     "a val.fraction)" if self.data is not None else "")  # fmt: skip
            raise ValueError(f"[val] sets {sets} val.fraction: set exactly one, val.data (held-out rows: a path or a "
                             f"dataset name) or val.fraction (a held-out share of the training rows){unset}")  # fmt: skip
        if self.data is not None and (self.data.path is None) == (self.data.name is None):
            raise ValueError("val.data needs exactly one of val.data.path (a local file) or val.data.name (a Hugging "
                             "Face dataset)")  # fmt: skip
        return self


def _same_rows(val: DatasetSource, val_path: Path | None, train: DatasetSource, train_path: Path | None) -> bool:
    if val_path is not None and train_path is not None:
        return os.path.abspath(val_path.expanduser()) == os.path.abspath(train_path.expanduser())
    return val.name is not None and (val.name, val.subset, val.split) == (train.name, train.subset, train.split)


def val_trained_on(val: SFTValConfig | None, sources: list[tuple[str, DatasetSource, Path | None]]) -> str | None:
    """Why `val.data` is rows the run trains on (the same file, or the same dataset name, subset and split as one
    of `sources`: (dotted field prefix, source, its path)), naming both fields and the fix; None when it is not
    (or `val.data` is unset)."""
    if val is None or val.data is None:
        return None
    for field, source, path in sources:
        if not _same_rows(val.data, val.data.path, source, path):
            continue
        if val.data.path is not None:
            said = f"`val.data.path = {json.dumps(str(val.data.path))}` is `{field}.path = {json.dumps(str(path))}`"
        else:
            said = (f"`val.data.name = {json.dumps(val.data.name)}` with `val.data.split = {json.dumps(val.data.split)}` "
                    f"is `{field}.name = {json.dumps(source.name)}` with `{field}.split = {json.dumps(source.split)}`"
                    f"{' (subset ' + json.dumps(source.subset) + ')' if source.subset else ''}")  # fmt: skip
        return (f"{said}: the validation rows are the training rows, so every one is trained on and val/loss is a "
                f"training loss; hold rows out with val.fraction (e.g. `val.fraction = 0.05` instead of [val.data]; "
                f"on the command line --val.data None --val.fraction 0.05), or point val.data at other rows (another "
                f"file, or another split such as val.data.split = \"test\")")  # fmt: skip
    return None
