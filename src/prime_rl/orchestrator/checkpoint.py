"""Orchestrator checkpoints: `checkpoints/step_N/orchestrator/state.json` + `STABLE` (written last).

The state is the step, the task stream (positions, epochs, picker RNG, drawn-but-untrained tasks to replay) and
counters; with the trainer's checkpoint of the same step it lets a resumed run continue the same task stream.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from prime_rl.monitor.rundir import step_dirs
from prime_rl.transport.atomic import STABLE, atomic_write_dir

SUBDIR = "orchestrator"
FORMAT = "prime-rl/orchestrator-ckpt"


def save_orchestrator_checkpoint(ckpt_root: Path, step: int, state: dict[str, Any], keep_last: int | None,
                                 keep_interval: int | None = None) -> Path:
    """Write the state atomically and prune this part's checkpoints older than the newest `keep_last`, except those
    whose step is a multiple of `keep_interval`."""
    payload = json.dumps({"format": FORMAT, "version": 1, "step": step, **state}, indent=1)
    path = atomic_write_dir(Path(ckpt_root) / f"step_{step}" / SUBDIR, lambda d: (d / "state.json").write_text(payload))
    if keep_last is not None:
        mine = [(n, p) for n, p in step_dirs(Path(ckpt_root)) if (p / SUBDIR / STABLE).is_file()]
        for step_no, step_dir in mine[:-keep_last]:
            if keep_interval is not None and step_no % keep_interval == 0:
                continue
            shutil.rmtree(step_dir / SUBDIR, ignore_errors=True)
            if step_dir.is_dir() and not any(step_dir.iterdir()):
                step_dir.rmdir()
    return path


def load_orchestrator_checkpoint(ckpt_root: Path, step: int) -> tuple[int, dict[str, Any]]:
    """`(step, state)` of the checkpoint at `step` (-1 = newest complete one).

    Raises:
        FileNotFoundError: no complete orchestrator checkpoint there (names the directory).
    """
    done = [(n, p / SUBDIR) for n, p in step_dirs(Path(ckpt_root)) if (p / SUBDIR / STABLE).is_file()]
    if step == -1:
        if not done:
            raise FileNotFoundError(f"no complete orchestrator checkpoint under {ckpt_root} (ckpt.resume_step = -1)")
        step_no, path = done[-1]
    else:
        found = dict(done)
        if step not in found:
            raise FileNotFoundError(
                f"no complete orchestrator checkpoint for step {step} under {ckpt_root} (have {sorted(found)}); "
                "set ckpt.resume_step to one of those or -1"
            )
        step_no, path = step, found[step]
    state = json.loads((path / "state.json").read_text())
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}/state.json is not an orchestrator checkpoint")
    return step_no, state
