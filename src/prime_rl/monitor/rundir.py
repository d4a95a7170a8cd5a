"""The run directory layout (DESIGN.md, "Run directory"). One place that names every path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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


def step_dirs(parent: Path, marker: str | None = None) -> list[tuple[int, Path]]:
    """`(N, path)` for every `parent/step_N` directory (with `marker` inside, if given), sorted by N."""
    out = []
    if not Path(parent).is_dir():
        return out
    for p in Path(parent).iterdir():
        if p.is_dir() and p.name.startswith("step_") and p.name[5:].isdigit():
            if marker is None or (p / marker).is_file():
                out.append((int(p.name[5:]), p))
    return sorted(out)
