"""Per-process logging: a timed console handler (rich) plus `logs/<process>.log` in the run directory."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from prime_rl.diskfull import DiskFullFileHandler

_FMT = "%(asctime)s %(levelname)-7s [%(name)s] %(message)s"
_DATEFMT = "%H:%M:%S"


def setup_logging(process: str, run_dir: Path | None = None, level: str = "info") -> logging.Logger:
    """Configure the root `prime_rl` logger for this process and return the process's logger.

    Console: `HH:MM:SS LEVEL [process] message` on stderr. File: `run_dir/logs/<process>.log` (appended) when
    `run_dir` is given.
    """
    root = logging.getLogger("prime_rl")
    root.setLevel(level.upper())
    for handler in list(root.handlers):
        root.removeHandler(handler)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(_FMT, _DATEFMT))
    root.addHandler(console)
    if run_dir is not None:
        log_dir = Path(run_dir) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        fh = DiskFullFileHandler(log_dir / f"{process}.log")  # a full disk is reported, not a traceback per record
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s [%(name)s] %(message)s"))
        root.addHandler(fh)
    root.propagate = False
    return logging.getLogger(f"prime_rl.{process}")


def get_logger(name: str) -> logging.Logger:
    """A child of the `prime_rl` logger (`prime_rl.<name>`)."""
    return logging.getLogger(f"prime_rl.{name}")
