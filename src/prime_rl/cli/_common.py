"""Helpers shared by the entry points."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prime_rl.registry import import_path


def load_impl(path: str) -> Callable[..., Any]:
    """The function at `package.module:function` that a command runs, imported only after its config parsed (so
    `--help` and config errors never import torch or vLLM). Raises RegistryError when it does not import."""
    return import_path(path, "entry point")


def dry_run(cfg: BaseModel, run_dir: Path, name: str) -> None:
    """Write the resolved config to `run_dir/configs/<name>.toml`, say where, and exit 0."""
    from prime_rl.config.loader import write_config

    if "dry_run" in type(cfg).model_fields:
        cfg = cfg.model_copy(update={"dry_run": False})  # the written file runs the command for real
    path = write_config(cfg, Path(run_dir) / "configs" / f"{name}.toml")
    print(f"resolved {name} config written to {path}")
    raise SystemExit(0)
