"""Trainer checkpoints: `checkpoints/step_N/trainer/` (torch.distributed.checkpoint), complete once `STABLE` exists.

Contents: `dcp/` — model and optimizer state, sharded (torch.distributed.checkpoint, any world size can load);
`rank_R.json` — scheduler state, progress and Python/NumPy RNG states of rank R; `rank_R.safetensors` — torch
RNG states of rank R. Everything is written into `step_N/.trainer.tmp/`, renamed to `trainer/` by rank 0, then
`STABLE` is written: a checkpoint without `STABLE` is incomplete and ignored on resume. No pickle is read.

A complete checkpoint that cannot be read (a file missing, cut short or garbled; a NaN in a loaded weight) raises
one `CheckpointError` naming the step, the file and the earlier complete checkpoint to resume from instead.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from prime_rl.diskfull import guard
from prime_rl.monitor.logger import get_logger
from prime_rl.monitor.rundir import step_dirs
from prime_rl.trainer.dist import DistInfo, barrier
from prime_rl.trainer.optim import init_adamw_state
from prime_rl.trainer.publish import prune_step_dirs
from prime_rl.transport.atomic import STABLE, atomic_write_bytes, publish_filled_dir

SUBDIR = "trainer"
log = get_logger("trainer.ckpt")


class CheckpointError(RuntimeError):
    """A checkpoint marked complete cannot be loaded; the message names the step, the file and what to do."""


def _step_of(path: Path) -> int | None:
    name = Path(path).parent.name
    return int(name[5:]) if name.startswith("step_") and name[5:].isdigit() else None


def checkpoint_error(path: Path, file: str, problem: str) -> CheckpointError:
    """The error for checkpoint `path` (`.../step_N/trainer`) whose `file` is unreadable: names both, and the
    newest earlier complete checkpoint to resume from (or says there is none)."""
    path = Path(path)
    step = _step_of(path)
    earlier = [n for n, p in step_dirs(path.parent.parent) if (p / SUBDIR / STABLE).is_file() and step is not None
               and n < step]  # fmt: skip
    if earlier:
        fix = (f"resume from the previous complete checkpoint, step {earlier[-1]}: --ckpt.resume-step {earlier[-1]} "
               f"(with `rl --resume`: delete {path.parent} first)")  # fmt: skip
    else:
        fix = "there is no earlier complete checkpoint: start the run over (rl --clean)"
    return CheckpointError(f"checkpoint step {step} ({path}) is corrupt: {file}: {problem}; {fix}")


def _check_dcp_files(path: Path) -> set[str]:
    """Read `dcp/.metadata` and check that every shard file it names exists and is long enough (no data read).
    Returns the (flattened) keys the checkpoint holds, e.g. `model.lm_head.weight`, `optim.state.<fqn>.step`.

    Raises:
        CheckpointError: the metadata is unreadable, or a shard file is missing or shorter than its entries need.
    """
    from torch.distributed.checkpoint import FileSystemReader

    dcp_dir = Path(path) / "dcp"
    try:
        meta = FileSystemReader(str(dcp_dir)).read_metadata()
    except Exception as e:
        raise checkpoint_error(path, "dcp/.metadata", f"unreadable ({type(e).__name__}: {e})") from None
    need: dict[str, int] = {}
    for info in (meta.storage_data or {}).values():
        rel = getattr(info, "relative_path", None)
        if rel is not None:
            need[rel] = max(need.get(rel, 0), int(info.offset) + int(info.length))
    for rel, needed in sorted(need.items()):
        shard = dcp_dir / rel
        if not shard.is_file():
            raise checkpoint_error(path, f"dcp/{rel}", "missing")
        if shard.stat().st_size < needed:
            raise checkpoint_error(path, f"dcp/{rel}",
                                   f"{shard.stat().st_size} bytes, its entries need {needed} (cut short)")
    return set(meta.state_dict_metadata or {})


def _rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    py = random.getstate()
    npst = np.random.get_state()
    meta = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [npst[0], npst[1].tolist(), int(npst[2]), int(npst[3]), float(npst[4])],
    }
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state()
    return meta, tensors


def _set_rng_state(meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    py_state = meta["python"]
    random.setstate((py_state[0], tuple(py_state[1]), py_state[2]))
    np_state = meta["numpy"]
    np.random.set_state((np_state[0], np.array(np_state[1], dtype=np.uint32), np_state[2], np_state[3], np_state[4]))
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["cuda"])


def save_checkpoint(
    ckpt_root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    progress: dict[str, Any],
    dist_info: DistInfo,
    keep_last: int | None = None,
    keep_interval: int | None = None,
) -> Path:
    """Save everything needed to continue after optimizer step `step` (collective: call on all ranks).

    `progress` is JSON-able (e.g. {"step": N, "total_tokens": ...}). Returns `ckpt_root/step_N/trainer`.

    Raises:
        DiskFullError: a write failed on a full disk (names `step_N`); the temporary `.trainer.tmp/` is removed, so
            no half checkpoint is left for a resume to find.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    step_dir = Path(ckpt_root) / f"step_{step}"
    tmp, final = step_dir / f".{SUBDIR}.tmp", step_dir / SUBDIR
    if dist_info.is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    barrier()
    try:
        with guard(step_dir):
            msd, osd = get_state_dict(model, optimizer)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp / "dcp"))
            meta, tensors = _rng_state()
            meta.update({"scheduler": scheduler.state_dict(), "progress": progress, "world_size": dist_info.world_size})
            atomic_write_bytes(tmp / f"rank_{dist_info.rank}.json", json.dumps(meta).encode())
            save_file(tensors, str(tmp / f"rank_{dist_info.rank}.safetensors"))
            barrier()
            if dist_info.is_main:
                publish_filled_dir(tmp, final, STABLE)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # never leave a half checkpoint (a full disk: DiskFullError)
        with contextlib.suppress(OSError):
            step_dir.rmdir()  # when nothing else (the orchestrator's part) is in it
        raise
    if dist_info.is_main:
        prune_step_dirs(Path(ckpt_root), keep_last, subdir=SUBDIR, keep_interval=keep_interval)
    barrier()
    return final


class CheckpointNotFound(FileNotFoundError):
    """The checkpoint a resume names is not there or not complete: the user's `ckpt.resume_step` / `resume_dir`
    (the `trainer` and `sft` commands report it in one line, exit 2)."""


def find_checkpoint(ckpt_root: Path, step: int) -> Path:
    """`ckpt_root/step_N/trainer` for `step` >= 0, or the newest complete one for `step == -1`.

    Raises:
        CheckpointNotFound: no complete checkpoint (names the folder searched and the step asked for).
    """
    complete = [(n, p / SUBDIR) for n, p in step_dirs(Path(ckpt_root)) if (p / SUBDIR / STABLE).is_file()]
    if step == -1:
        if not complete:
            raise CheckpointNotFound(f"ckpt.resume_step = -1 but no complete trainer checkpoint under {ckpt_root}")
        return complete[-1][1]
    for step_no, step_dir in complete:
        if step_no == step:
            return step_dir
    raise CheckpointNotFound(
        f"ckpt.resume_step = {step}: no complete checkpoint {Path(ckpt_root) / f'step_{step}' / SUBDIR} "
        f"(complete ones: {[n for n, _ in complete]})"
    )


def _dcp_failure(path: Path, error: BaseException) -> tuple[str, str]:
    """(file, problem) of a failed `dcp.load`: dcp's CheckpointException holds `{rank: (exception, traceback)}`;
    the failing rank's shard file is named when there is one (`__R_0.distcp`), else the shard files."""
    failures = getattr(error, "failures", None) or {}
    rank, root = next(iter(failures.items()), (None, error))
    root = root[0] if isinstance(root, tuple) and root else root
    files = sorted((Path(path) / "dcp").glob(f"__{rank}_*.distcp")) if rank is not None else []
    file = f"dcp/{files[0].name}" if len(files) == 1 else "dcp/ shard files (__*.distcp)"
    text = f"{type(root).__name__}: {root}"
    return file, f"unreadable ({text[:200]}{'...' if len(text) > 200 else ''})"


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    dist_info: DistInfo,
    skip_optimizer: bool = False,
    skip_scheduler: bool = False,
) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG from `path` (from `find_checkpoint`); returns `progress`.
    `skip_optimizer`: AdamW's state is left fresh (`init_adamw_state`: zero moments, step 0; the param groups keep
    this run's settings); `skip_scheduler`: the scheduler is left as built (its first step).

    A checkpoint without AdamW state (written by prime-rl before `optim.init_adamw_state`, when no step had updated
    the weights yet) loads with zero moments and step 0, what AdamW would have created at its first update.

    Raises:
        CheckpointError: a file of the checkpoint is missing, cut short or unreadable, or a loaded weight is not
            finite (names the step, the file and the earlier checkpoint to resume from).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    keys = _check_dcp_files(path)
    msd, osd = get_state_dict(model, optimizer)
    # A checkpoint written before `init_adamw_state` existed, after steps that all skipped their update, holds no
    # AdamW state: load its model and param groups (lr), and keep the fresh optimizer's zero state (what AdamW
    # would have created at its first step anyway).
    no_adam_state = not any(k.startswith("optim.state.") for k in keys)
    if no_adam_state:
        osd = {**osd, "state": {}}
    state = {"model": msd, "optim": osd}
    try:
        dcp.load(state, checkpoint_id=str(path / "dcp"))
    except (Exception, CheckpointException) as e:
        raise checkpoint_error(path, *_dcp_failure(path, e)) from None
    bad = [k for k, v in state["model"].items() if torch.is_tensor(v) and v.is_floating_point()
           and not bool(torch.isfinite(v.full_tensor() if hasattr(v, "full_tensor") else v).all())]  # fmt: skip
    if bad:
        raise checkpoint_error(path, "dcp/ shard files (__*.distcp)", f"weights {bad[:3]} hold NaN or inf")
    if skip_optimizer:  # the model alone; AdamW as at its first step (get_state_dict filled it with a 0-lr step)
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, state["model"])
        optimizer.state.clear()
        init_adamw_state(optimizer)
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if no_adam_state and not skip_optimizer:
        log.warning(f"{path}: no optimizer state (saved before any update, by an older prime-rl): AdamW starts "
                    "from zero moments, as it would have at its first update")  # fmt: skip
        init_adamw_state(optimizer)
    meta_path = path / f"rank_{dist_info.rank}.json"
    if not meta_path.is_file():
        log.warning(f"{meta_path} missing (checkpoint from another world size): using rank 0's scheduler and RNG")
        meta_path = path / "rank_0.json"
    try:
        meta = json.loads(meta_path.read_text())
        if not skip_scheduler:
            scheduler.load_state_dict(meta["scheduler"])
        if skip_scheduler or skip_optimizer:  # the param groups' lr (loaded, or fresh) follows the scheduler's
            for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr(), strict=True):
                group["lr"] = lr
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise checkpoint_error(path, meta_path.name, f"unreadable ({type(e).__name__}: {e})") from None
    rng_path = meta_path.with_suffix(".safetensors")
    try:
        tensors = load_file(str(rng_path))
    except Exception as e:  # safetensors raises its own error type
        raise checkpoint_error(path, rng_path.name, f"unreadable ({type(e).__name__}: {e})") from None
    _set_rng_state(meta, tensors)
    return meta["progress"]
