"""`--resume` and `--clean`: find the newest complete checkpoint; clear what a previous run left behind.

A checkpoint step N is complete when both `checkpoints/step_N/trainer/` and `checkpoints/step_N/orchestrator/`
exist and each holds its `STABLE` marker (written last by trainer and orchestrator, as for weights). Rollouts and policy versions of steps after N are deleted before the
resumed run starts, so neither trainer nor orchestrator can pick up a half-finished step of the dead run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from prime_rl.launcher.errors import PreflightError
from prime_rl.monitor.rundir import RunDir, step_dirs
from prime_rl.transport.atomic import STABLE


def _part_complete(d: Path) -> bool:
    return (d / STABLE).is_file()


def complete_checkpoints(run: RunDir) -> list[int]:
    """Steps with a complete trainer and orchestrator checkpoint, ascending."""
    return [n for n, d in step_dirs(run.checkpoints) if _part_complete(d / "trainer") and _part_complete(d / "orchestrator")]


def latest_checkpoint(run: RunDir) -> int:
    """The newest complete checkpoint step.

    Raises:
        PreflightError: there is none (names the directory and how to get checkpoints).
    """
    steps = complete_checkpoints(run)
    if not steps:
        raise PreflightError(
            f"--resume: no complete checkpoint under {run.checkpoints} (a step needs trainer/ and orchestrator/); "
            f"set `ckpt.interval` so runs save them, or start a fresh run without --resume"
        )
    return steps[-1]


def drop_steps_after(run: RunDir, step: int) -> list[Path]:
    """Delete `rollouts/step_M` and `weights/step_M` for M > step, and incomplete checkpoints (later steps, and the
    temporary `.trainer.tmp/`-style folders a writer left, e.g. on a full disk); return what went."""
    gone = []
    for parent in (run.rollouts, run.weights, run.checkpoints):
        for n, d in step_dirs(parent):
            if n > step:
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
            else:
                for tmp in d.glob(".*.tmp*"):
                    shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
                    gone.append(tmp)
    return gone


def previous_run(run: RunDir) -> list[Path]:
    """Artifacts of an earlier run in this directory (step folders, eval results, metrics)."""
    found = [d for parent in (run.rollouts, run.weights, run.checkpoints) for _, d in step_dirs(parent)]
    if run.metrics.exists():
        found.append(run.metrics)
    if run.eval.is_dir() and any(run.eval.iterdir()):
        found.append(run.eval)
    return found


def clean(run: RunDir) -> None:
    """Remove a previous run's rollouts, weights, checkpoints, eval, plots, logs and metrics (configs stay)."""
    for d in (run.rollouts, run.weights, run.checkpoints, run.eval, run.plots, run.logs):
        shutil.rmtree(d, ignore_errors=True)
    run.metrics.unlink(missing_ok=True)
