"""The run directory layout (docs/design.md, "Run directory"). One place that names every path."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory `root`."""

    root: Path

    @property
    def configs(self) -> Path:
        return self.root / "configs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts"

    def rollout_step(self, step: int) -> Path:
        return self.rollouts / f"step_{step}"

    def rollout_file(self, step: int, rank: int) -> Path:
        return self.rollout_step(step) / f"rank_{rank}.bin"

    @property
    def weights(self) -> Path:
        return self.root / "weights"

    def weight_step(self, step: int) -> Path:
        return self.weights / f"step_{step}"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint_step(self, step: int) -> Path:
        return self.checkpoints / f"step_{step}"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    def log_file(self, process: str) -> Path:
        return self.logs / f"{process}.log"


def _scan_steps(parent: Path, above: int = -1) -> list[tuple[int, str]] | None:
    """`(N, path)` of every `parent/step_N` directory with N > `above`, unsorted, from one `os.scandir` (the entry's
    type, no stat per entry where the file system reports it); None when `parent` is missing or not a directory."""
    try:
        with os.scandir(parent) as it:
            return [(int(e.name[5:]), e.path) for e in it
                    if e.name.startswith("step_") and e.name[5:].isdigit() and int(e.name[5:]) > above
                    and e.is_dir()]  # fmt: skip
    except (FileNotFoundError, NotADirectoryError):
        return None


def step_dirs(parent: Path, marker: str | None = None) -> list[tuple[int, Path]]:
    """`(N, path)` for every `parent/step_N` directory (with `marker` inside, if given), sorted by N; empty when
    `parent` does not exist."""
    found = _scan_steps(parent) or []
    return sorted((n, Path(p)) for n, p in found if marker is None or os.path.isfile(os.path.join(p, marker)))


def newest_step_dir(parent: Path, marker: str, above: int = -1) -> tuple[int, Path] | None:
    """The newest `(N, parent/step_N)` with `marker` inside and N > `above`, or None: one listing, and the marker is
    checked only for versions newer than `above`, newest first. The orchestrator's weight watcher calls it every
    10 ms, so it uses `os.scandir` rather than pathlib."""
    for step, step_dir in sorted(_scan_steps(parent, above) or [], reverse=True):
        if os.path.isfile(os.path.join(step_dir, marker)):
            return step, Path(step_dir)
    return None


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON rows of a run-directory file (traces.jsonl, eval/step_N.jsonl), or [] when it is missing or has a
    line that is not JSON yet (a writer mid-line): readers that poll show the rows on their next look."""
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError):
        return []
