"""Where a run starts (`--resume`, `ckpt.resume_step`, `ckpt.resume_dir`, `--clean`): find and check the
checkpoint to load; clear what a previous run left behind.

A checkpoint step N is complete when both `checkpoints/step_N/trainer/` and `checkpoints/step_N/orchestrator/`
exist and each holds its `STABLE` marker (written last by trainer and orchestrator, as for weights). Rollouts and
policy versions of steps after N are deleted before the resumed run starts, so neither trainer nor orchestrator can
pick up a half-finished step of the dead run. `start` decides the start of an `rl` run and refuses, before anything
starts, a resume with no complete checkpoint to load (the trainer would stop only after vLLM's start-up).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_rl.launcher.errors import PreflightError
from prime_rl.monitor.rundir import RunDir, step_dirs
from prime_rl.transport.atomic import STABLE


def _part_complete(folder: Path) -> bool:
    return (folder / STABLE).is_file()


def complete_checkpoints(run: RunDir | Path) -> list[int]:
    """Steps with a complete trainer and orchestrator checkpoint, ascending (`run`: a run, or its checkpoints
    folder)."""
    root = run.checkpoints if isinstance(run, RunDir) else Path(run)
    return [n for n, d in step_dirs(root) if _part_complete(d / "trainer") and _part_complete(d / "orchestrator")]


def missing_parts(step_dir: Path) -> list[str]:
    """Why `step_dir` (`checkpoints/step_N`) is not a complete checkpoint, one phrase per missing part; empty when
    it is complete."""
    if not step_dir.is_dir():
        return [f"{step_dir} does not exist"]
    out = []
    for part in ("trainer", "orchestrator"):
        if not (step_dir / part).is_dir():
            out.append(f"{part}/ is missing")
        elif not _part_complete(step_dir / part):
            out.append(f"{part}/ has no {STABLE} marker, so its save did not finish")
    return out


def latest_checkpoint(run: RunDir, hint: str = "") -> int:
    """The newest complete checkpoint step (`hint`: appended to the error).

    Raises:
        PreflightError: there is none (names the directory and how to get checkpoints).
    """
    steps = complete_checkpoints(run)
    if not steps:
        raise PreflightError(
            f"--resume: no complete checkpoint under {run.checkpoints} (a step needs trainer/ and orchestrator/); "
            f"set `ckpt.interval` so runs save them, or start a fresh run without --resume{hint}"
        )
    return steps[-1]


@dataclass(frozen=True)
class Start:
    """How an `rl` run starts: after checkpoint `step` (0: from scratch) of this run (`resume`: later steps are
    dropped first) or of another run (`fork`: its `checkpoints/step_N` folder); `clean`: a previous run's artifacts
    are removed first; `changes`: dotted config fields the plan sets (`evolve`)."""

    step: int = 0
    resume: bool = False
    clean: bool = False
    fork: Path | None = None
    changes: dict[str, Any] = field(default_factory=dict)


def start(cfg: Any, run: RunDir) -> Start:
    """Decide where the `rl` run `cfg` starts and check that what it loads is there: `--resume` (the newest complete
    checkpoint of this run, or `ckpt.resume_step`'s), `ckpt.resume_step` alone (the same), `ckpt.resume_dir` (a
    fork), else a fresh run (`--clean` over a previous one). A forked run that stopped continues with `--resume`
    from its own checkpoints; its `resume_dir` is then not loaded again.

    Raises:
        PreflightError: names the field, the folder searched, the missing part, the complete steps and the fix:
            no complete checkpoint to load; trainer and orchestrator resuming different checkpoints; a fork from
            inside this run's own folder; `--clean` with a resume; a previous run there without --resume/--clean.
    """
    ckpt = cfg.trainer.ckpt
    _check_same_target(cfg)
    if (cfg.resume or ckpt.resume_step is not None) and cfg.clean:
        what = "--resume" if cfg.resume else "{0} = {2}{1}".format(*_field(cfg, "resume_step"), ckpt.resume_step)
        raise PreflightError(f"--clean removes the checkpoints that {what} continues from; pass one of them")
    if cfg.resume or ckpt.resume_step is not None:
        step = _own_step(cfg, run)
        changes = {f"{s}.ckpt.{k}": v for s in ("trainer", "orchestrator")
                   for k, v in (("resume_step", step), ("resume_dir", None))}  # fmt: skip
        return Start(step=step, resume=True, changes=changes)
    clean = _previous_run_cleared(cfg, run)
    if ckpt.resume_dir is None:
        return Start(clean=clean)
    step = _fork_step(cfg, run)
    changes = absolute_resume_dir(cfg)
    return Start(step=step, clean=clean, fork=changes.get("trainer.ckpt.resume_dir", Path(ckpt.resume_dir)),
                 changes={k: v for k, v in changes.items() if k != "ckpt.resume_dir"})  # fmt: skip


def absolute_resume_dir(cfg: Any) -> dict[str, Path]:
    """`ckpt.resume_dir` given relative to the working directory (where `rl` runs), made absolute in the shared
    `[ckpt]` and in both sections: the children, a Slurm job's nodes (`slurm.workdir`) and a later
    `trainer @ configs/trainer.toml` may run in another working directory. Returns the changes (dotted field ->
    resolved path; empty when no resume_dir is set or each is absolute already)."""
    out: dict[str, Path] = {}
    for dotted in ("ckpt", "trainer.ckpt", "orchestrator.ckpt"):
        ckpt = cfg
        for name in dotted.split("."):
            ckpt = getattr(ckpt, name, None)
        if ckpt is not None and ckpt.resume_dir is not None and not Path(ckpt.resume_dir).is_absolute():
            out[f"{dotted}.resume_dir"] = Path(ckpt.resume_dir).resolve()
    return out


def _field(cfg: Any, name: str) -> tuple[str, str]:
    """`(field, where)`: `ckpt.NAME` when the shared `[ckpt]` set it, else `trainer.ckpt.NAME` (trainer and
    orchestrator agree), and where it was set (` (from --flag)`, ` (in FILE)`; `fields.as_set`)."""
    from prime_rl.launcher.fields import as_set

    return as_set(cfg, f"trainer.ckpt.{name}")


def _check_same_target(cfg: Any) -> None:
    """Trainer and orchestrator resume the same checkpoint, or neither does (names both fields and the fix)."""
    from prime_rl.launcher.fields import as_set

    def target(section: str) -> tuple[str, Any] | None:
        ckpt = getattr(cfg, section).ckpt
        if ckpt.resume_dir is not None:
            name, value, key = "resume_dir", repr(str(ckpt.resume_dir)), ("dir", Path(ckpt.resume_dir).resolve())
        elif ckpt.resume_step is not None:
            name, value, key = "resume_step", str(ckpt.resume_step), ("step", ckpt.resume_step)
        else:
            return None
        return f"{section}.ckpt.{name} = {value}{as_set(cfg, f'{section}.ckpt.{name}')[1]}", key

    trainer_target, orch_target = target("trainer"), target("orchestrator")
    if (trainer_target and trainer_target[1]) == (orch_target and orch_target[1]):
        return
    targets = (("trainer", trainer_target), ("orchestrator", orch_target))
    said = [x[0] if x else f"{s}.ckpt resumes nothing" for s, x in targets]
    raise PreflightError(
        f"{said[0]} but {said[1]}: under rl both load the same checkpoint (the trainer's weights and step belong with "
        "the orchestrator's task stream); set resume_dir or resume_step once, in the shared [ckpt] section"
    )


def _listing(ckpts: Path) -> tuple[list[int], str]:
    steps = complete_checkpoints(ckpts)
    return steps, f"complete checkpoints under {ckpts}: {'steps ' + ', '.join(map(str, steps)) if steps else 'none'}"


def _not_complete(head: str, step_dir: Path) -> str:
    problems = missing_parts(step_dir)
    if not step_dir.is_dir():
        return f"{head}: {problems[0]}"
    return f"{head}: {step_dir} is not a complete checkpoint ({'; '.join(problems)})"


def _own_step(cfg: Any, run: RunDir) -> int:
    """The checkpoint step of this run that `--resume` (the newest) or `ckpt.resume_step` continues after."""
    ck = cfg.trainer.ckpt
    steps, listing = _listing(run.checkpoints)
    if ck.resume_step is None:  # --resume
        if steps:
            return steps[-1]
        forked = (f"; ckpt.resume_dir = {str(ck.resume_dir)!r} is not loaded with --resume (a forked run continues "
                  "from its own checkpoints): to fork again, drop --resume and pass --clean") if ck.resume_dir else ""
        return latest_checkpoint(run, forked)
    if (ck.resume_step == -1 and steps) or ck.resume_step in steps:
        return steps[-1] if ck.resume_step == -1 else ck.resume_step
    field_, where = _field(cfg, "resume_step")
    head = (f"{field_} = -1{where} asks for the newest complete checkpoint of this run" if ck.resume_step == -1 else
            _not_complete(f"{field_} = {ck.resume_step}{where}", run.checkpoints / f"step_{ck.resume_step}"))  # fmt: skip
    fix = (f"set {field_} to one of them or -1 (the newest), or start a fresh run without it" if steps else
           f"start a fresh run without {field_} (runs save checkpoints with ckpt.interval)")  # fmt: skip
    raise PreflightError(
        f"{head}; {listing}; {fix}. To start from another run's checkpoint, set ckpt.resume_dir to its "
        "checkpoints/step_N folder instead"
    )


def _fork_step(cfg: Any, run: RunDir) -> int:
    """The step of the complete checkpoint folder `ckpt.resume_dir` names (another run's `checkpoints/step_N`)."""
    src = Path(cfg.trainer.ckpt.resume_dir)
    field_, where = _field(cfg, "resume_dir")
    head = f"{field_} = {str(src)!r}{where}"
    if src.resolve().is_relative_to(run.root.resolve()):
        raise PreflightError(
            f"{head} is inside this run's own output_dir {run.root}: a fork starts a new run from another run's "
            "checkpoint; continue this run with --resume (its newest complete checkpoint) or ckpt.resume_step = N"
        )
    if missing_parts(src):  # folders named as the user wrote them (relative: to the working directory)
        steps, listing = _listing(src.parent)
        fix = (f"set {field_} to one of them (e.g. {src.parent / f'step_{steps[-1]}'})" if steps else
               "the source run saves checkpoints with ckpt.interval")  # fmt: skip
        raise PreflightError(f"{_not_complete(head, src)}; {listing}; {fix}")
    return int(src.name.removeprefix("step_"))


def _previous_run_cleared(cfg: Any, run: RunDir) -> bool:
    """Whether a previous run's artifacts are to be removed (`--clean`).

    Raises:
        PreflightError: a previous run is there and neither --resume nor --clean was given."""
    leftovers = previous_run(run)
    if leftovers and not cfg.clean:
        raise PreflightError(
            f"output_dir {run.root} already holds a run ({leftovers[0]}); pass --resume to continue it, "
            f"--clean to start over there, or choose another output_dir"
        )
    return bool(leftovers)


def drop_steps_after(run: RunDir, step: int) -> list[Path]:
    """Delete `rollouts/step_M` and `weights/step_M` for M > step, and incomplete checkpoints (later steps, and the
    temporary `.trainer.tmp/`-style folders a writer left, e.g. on a full disk); return what went."""
    gone = []
    for parent in (run.rollouts, run.weights, run.checkpoints):
        for step_no, step_dir in step_dirs(parent):
            if step_no > step:
                shutil.rmtree(step_dir, ignore_errors=True)
                gone.append(step_dir)
            else:
                for tmp in step_dir.glob(".*.tmp*"):
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
    for folder in (run.rollouts, run.weights, run.checkpoints, run.eval, run.plots, run.logs):
        shutil.rmtree(folder, ignore_errors=True)
    run.metrics.unlink(missing_ok=True)
