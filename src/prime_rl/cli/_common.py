"""Helpers shared by the entry points."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel


def load_impl(module: str, attr: str, part: str) -> Callable[..., Any]:
    """Import `module.attr` lazily; exit 2 with a clear message when that part of prime-rl is not built yet."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (e.name == module or module.startswith(e.name + ".")) and e.name.startswith("prime_rl"):
            print(f"error: {part} is not built yet in this version of prime-rl (missing module {module})", file=sys.stderr)
            raise SystemExit(2) from None
        raise
    return getattr(mod, attr)


def dry_run(cfg: BaseModel, run_dir: Path, name: str) -> None:
    """Write the resolved config to `run_dir/configs/<name>.toml`, say where, and exit 0."""
    from prime_rl.config.loader import write_config

    if "dry_run" in type(cfg).model_fields:
        cfg = cfg.model_copy(update={"dry_run": False})  # the written file runs the command for real
    path = write_config(cfg, Path(run_dir) / "configs" / f"{name}.toml")
    print(f"resolved {name} config written to {path}")
    raise SystemExit(0)
