"""Rows from files or Hugging Face datasets: what SFT trains on and what RL/eval task sources read.

A source of rows is a local file (`path`: `.jsonl` read directly; `.json`, `.parquet`, `.arrow`, `.csv`, or a
folder written by `Dataset.save_to_disk` or holding data files, through `datasets`) or a dataset name for
`datasets.load_dataset(name, subset, split=split)` (a hub id where the Hugging Face Hub is reachable, or a local
dataset folder). `columns` renames dataset columns to the names prime-rl reads (`{"messages": "conversations"}`:
our `messages` is their `conversations`). Rows come back as plain dicts; Arrow's filling of missing struct fields
with null is undone (a message without `tool_calls` does not get `"tool_calls": None`).

A hub name that cannot be reached fails fast with what to do instead (a local file, a local dataset folder, or
`HF_HUB_OFFLINE=1` for a copy in the datasets cache), not after `datasets`' own retries.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

DIRECT = (".jsonl",)
BUILDERS = {".json": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}


class DataLoadError(ValueError):
    """Rows could not be loaded; the message names the config field, the source and the fix."""


def read_jsonl(path: Path, field: str) -> list[dict[str, Any]]:
    """Rows of a JSONL file, each a JSON object. Raises DataLoadError naming `field`, the file and the line."""
    rows = []
    with open(path) as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataLoadError(f"{field} = {str(path)!r}: line {line_no} is not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataLoadError(f"{field} = {str(path)!r}: line {line_no} is not a JSON object")
            rows.append(row)
    return rows


def strip_nulls(value: Any) -> Any:
    """`value` with every None-valued dict key removed, recursively (Arrow stores absent struct fields as null)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def rename_columns(row: dict[str, Any], columns: dict[str, str], where: str) -> dict[str, Any]:
    """`row` with `columns` applied ({our name: their column}). Raises DataLoadError for a missing column."""
    if not columns:
        return row
    out = dict(row)
    for ours, theirs in columns.items():
        if theirs not in row:
            raise DataLoadError(f"{where}: column {theirs!r} (mapped to {ours!r}) is not in the data; it has {sorted(row)}")
        out.pop(theirs)
        out[ours] = row[theirs]
    return out


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face Hub endpoint (`HF_ENDPOINT`, default huggingface.co) accepts a TCP connection."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).lower() in ("1", "true", "yes", "on")


def _to_rows(ds: Any) -> list[dict[str, Any]]:
    return [strip_nulls(dict(r)) for r in ds]


def _datasets(field: str) -> Any:
    from prime_rl.extras import MissingExtraError, require

    try:
        return require("datasets", "datasets", f"{field} (Hugging Face datasets)")
    except MissingExtraError as e:
        raise DataLoadError(f"{e}; or give a .jsonl file, which needs nothing") from None


def _load_local(path: Path, field: str, split: str) -> list[dict[str, Any]]:
    if path.is_file() and path.suffix in DIRECT:
        return read_jsonl(path, field)
    datasets = _datasets(field)
    try:
        if path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[split]
        elif path.is_dir():
            ds = datasets.load_dataset(str(path), split=split)
        elif path.suffix in BUILDERS:
            ds = datasets.load_dataset(BUILDERS[path.suffix], data_files=str(path), split="train")
        else:
            raise DataLoadError(
                f"{field} = {str(path)!r}: unknown file type {path.suffix!r}; use .jsonl, .json, .parquet, .arrow "
                f".csv or a dataset folder"
            )
    except DataLoadError:
        raise
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise DataLoadError(f"{field} = {str(path)!r}: {type(e).__name__}: {e}") from None
    return _to_rows(ds)


def _load_named(name: str, subset: str | None, split: str, field: str) -> list[dict[str, Any]]:
    datasets = _datasets(field)
    local = Path(name).expanduser()
    if not local.exists() and not _offline() and not hub_reachable():
        raise DataLoadError(
            f"{field} = {name!r}: not a local path, and the Hugging Face Hub "
            f"({os.environ.get('HF_ENDPOINT') or 'huggingface.co'}) is not reachable from this machine; give a local "
            f"file or dataset folder, or set HF_HUB_OFFLINE=1 to use a copy in the datasets cache"
        )
    try:
        ds = datasets.load_dataset(str(local) if local.exists() else name, subset, split=split)
    except ConnectionError as e:  # offline mode without a cached copy, or the hub went away
        raise DataLoadError(
            f"{field} = {name!r}: could not be loaded from the Hugging Face Hub or the datasets cache ({e}); give "
            f"a local file or dataset folder"
        ) from None
    except (ValueError, FileNotFoundError) as e:  # unknown subset or split, no such dataset
        raise DataLoadError(f"{field} = {name!r} (subset {subset!r}, split {split!r}): {type(e).__name__}: {e}") from None
    except Exception as e:  # datasets raises its own kinds (DatasetNotFoundError, ...)
        if type(e).__module__.startswith(("datasets", "huggingface_hub")):
            raise DataLoadError(f"{field} = {name!r}: {type(e).__name__}: {e}") from None
        raise
    return _to_rows(ds)


def load_rows(*, path: str | Path | None = None, name: str | None = None, subset: str | None = None,
              split: str = "train", columns: dict[str, str] | None = None, field: str = "data") -> list[dict[str, Any]]:  # fmt: skip
    """The rows of one source: exactly one of `path` (a local file or folder) and `name` (a dataset name).

    `field` is the config field the source came from (`data`, `env.taskset`), for messages.

    Raises:
        DataLoadError: both or neither source given, a missing file, an unreadable row, a missing mapped column,
            an unknown split, an unreachable hub, no rows (each names `field` and the source).
    """
    if (path is None) == (name is None):
        raise DataLoadError(f"{field}: give exactly one of `path` (a local file) and `name` (a dataset name)")
    if path is not None:
        resolved = Path(path).expanduser()
        if not resolved.exists():
            raise DataLoadError(f"{field}.path = {str(resolved)!r} does not exist")
        rows = _load_local(resolved, f"{field}.path", split)
        where = f"{field}.path = {str(resolved)!r}"
    else:
        rows = _load_named(str(name), subset, split, f"{field}.name")
        where = f"{field}.name = {name!r}"
    if not rows:
        raise DataLoadError(f"{where}: no rows")
    return [rename_columns(r, columns or {}, where) for r in rows]
