"""`metrics.jsonl`: one JSON row per step and process, appended safely by several processes."""

from __future__ import annotations

import fcntl
import json
import math
import time
from pathlib import Path
from typing import Any

from prime_rl.diskfull import guard


class MetricsWriter:
    """Append metric rows to `run_dir/metrics.jsonl` (one line per call, under an exclusive file lock).

    Each row gets `process`, `step` and a wall-clock `time` (s since the epoch). Non-finite floats are written
    as null so every line is valid JSON.
    """

    def __init__(self, run_dir: Path, process: str):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.process = process

    def log(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        row = {"process": self.process, "step": int(step), "time": time.time()}
        row.update({k: _clean(v) for k, v in metrics.items()})
        line = json.dumps(row, sort_keys=False) + "\n"
        with guard(self.path.parent), open(self.path, "a") as f:  # a full disk: DiskFullError
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.write(line)
                f.flush()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return row


def read_metrics(run_dir: Path, process: str | None = None) -> list[dict[str, Any]]:
    """Rows of `run_dir/metrics.jsonl`, optionally only those of one process."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if process is None or row.get("process") == process:
                rows.append(row)
    return rows


def _clean(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
