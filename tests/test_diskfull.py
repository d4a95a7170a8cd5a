"""A full disk, named (`prime_rl.diskfull`): the helper's detection and reason line, and real full filesystems (a
small tmpfs mounted for the test) under a trainer checkpoint, published weights, the orchestrator's batch files and
traces, a log file handler and a command (`prime-rl tiny-model`).

Before the helper: `dcp.save` on a full disk raised torch's `CheckpointException` and left `step_N/.trainer.tmp/`
with an empty `.distcp`; atomic writes raised a bare `OSError` and left their `.NAME.tmp.PID` file; a log handler
printed `--- Logging error ---` with a traceback per record; a command exited 1 with a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn

from prime_rl import diskfull
from prime_rl.diskfull import DiskFullError, child_reason, describe, is_disk_full

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@contextlib.contextmanager
def small_fs(where: Path, size: str = "4m"):
    """A tmpfs of `size` mounted at `where` (skips the test when mounting is not permitted); unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                       text=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(fs: Path, leave: int = 0) -> None:
    """Write a filler file until at most `leave` bytes are free on the filesystem of `fs`."""
    with open(fs / f"filler-{uuid.uuid4().hex}", "wb") as f:
        chunk = b"\0" * (64 << 10)
        try:
            while os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize > leave + len(chunk):
                f.write(chunk)
                f.flush()
            f.write(b"\0" * max(0, os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize - leave))
            f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC


# -- the helper ------------------------------------------------------------------------------------------------


def test_describe_names_the_folder_and_its_free_space(tmp_path):
    line = describe(tmp_path / "not" / "yet")
    assert line.startswith(f"no space left on device under {tmp_path / 'not' / 'yet'} (")
    import shutil

    free = shutil.disk_usage(tmp_path).free
    assert " free of " in line and diskfull._size(free).split()[1] in line
    assert diskfull.LINE_RE.search(f"12:00 ERROR x: {line}").group(0) == line


def test_disk_full_is_found_however_it_is_wrapped():
    class CheckpointException(BaseException):  # torch.distributed.checkpoint's shape: {rank: (exception, tb)}
        def __init__(self, failures):
            self.failures = failures

    enospc = OSError(errno.ENOSPC, "No space left on device", "/r/x.bin")
    assert is_disk_full(enospc) and is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                     "message: \"No space left on device\" })"))  # safetensors' text
    assert is_disk_full(CheckpointException({0: (enospc, "tb")}))
    try:
        try:
            raise enospc
        except OSError as e:
            raise ValueError("while writing") from e
    except ValueError as e:
        assert is_disk_full(e)
        assert diskfull.reason(e) == describe("/r")
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied")) and not is_disk_full(ValueError("28"))
    assert diskfull.reason(ValueError("x")) is None


def test_guard_names_the_path_and_exit_on_disk_full_exits_28(tmp_path, capfd, monkeypatch):
    reason_file = tmp_path / "why"
    monkeypatch.setenv(diskfull.REASON_ENV, str(reason_file))
    with pytest.raises(DiskFullError) as info:
        with diskfull.guard(tmp_path / "ckpt"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(info.value) == describe(tmp_path / "ckpt")
    with pytest.raises(SystemExit) as ex:
        with diskfull.exit_on_disk_full(tmp_path, "trainer"):
            raise info.value
    assert ex.value.code == diskfull.EXIT_CODE == 28
    assert f"trainer: error: no space left on device under {tmp_path / 'ckpt'} (" in capfd.readouterr().err
    assert reason_file.read_text().startswith(f"no space left on device under {tmp_path / 'ckpt'} (")
    with pytest.raises(KeyError):  # anything else passes through
        with diskfull.exit_on_disk_full(tmp_path):
            raise KeyError("x")


def test_guard_names_a_write_error_without_errno_on_a_full_disk(tmp_path):
    with pytest.raises(RuntimeError):  # space left: passed through
        with diskfull.guard(tmp_path):
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    with small_fs(tmp_path / "fs", "1m") as fs:
        fill(fs)
        with pytest.raises(DiskFullError):
            with diskfull.guard(fs / "step_1"):
                raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")


def test_guard_names_a_short_write_that_left_more_than_a_mebibyte(tmp_path):
    """torch.distributed.checkpoint's writer on a nearly full 12 MiB disk failed with `unexpected pos 704 vs 598`
    (no errno) while 1.5-4 MiB were still free: the write that failed needed more. A short write with little room
    left is a full disk; the same error with room to spare is reported as itself."""
    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    with small_fs(tmp_path / "roomy", "256m") as roomy:  # 256 MiB free: over 64 MiB and over 5% of its size
        with pytest.raises(RuntimeError) as e:
            with diskfull.guard(roomy / "step_3"):
                raise short
        assert not isinstance(e.value, DiskFullError)
    with small_fs(tmp_path / "fs", "12m") as fs:
        fill(fs, leave=3 << 20)
        with pytest.raises(DiskFullError):
            with diskfull.guard(fs / "step_3"):
                raise short
        from torch.distributed.checkpoint.api import CheckpointException

        wrapped = CheckpointException("failed", {0: (short, None)})  # how dcp.save raises it (a BaseException)
        with pytest.raises(DiskFullError):
            with diskfull.guard(fs / "step_3"):
                raise wrapped
        with pytest.raises(KeyboardInterrupt):  # an interruption is never turned into a full disk
            with diskfull.guard(fs / "step_3"):
                raise KeyboardInterrupt
        with pytest.raises(ValueError):  # not a write error: passed through
            with diskfull.guard(fs / "step_3"):
                raise ValueError("bad config")


def test_child_reason_for_rl(tmp_path):
    line = describe(tmp_path / "weights")
    (tmp_path / "t.reason").write_text(line + "\n")
    assert child_reason(tmp_path / "t.reason", "", 1, tmp_path) == line
    tail = f"junk\n10:00:00 ERROR [prime_rl.trainer] trainer: error: {line}\n[rank0]: ChildFailedError\n"
    assert child_reason(tmp_path / "none.reason", tail, 1, tmp_path) == line
    assert child_reason(None, "OSError: [Errno 28] No space left on device\n", 1, tmp_path) == describe(tmp_path)
    assert child_reason(None, "cut mid-li", 28, tmp_path) == describe(tmp_path)
    assert child_reason(None, "KeyError: 'x'\n", 1, tmp_path) is None


# -- real full filesystems ---------------------------------------------------------------------------------------


def _train_state():
    from prime_rl.trainer.dist import DistInfo

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))  # 0.5 MiB of fp32 weights
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 256)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return model, opt, sched, DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                                       owns_group=False)


def test_a_checkpoint_on_a_full_disk_names_it_and_leaves_nothing_to_resume_from(tmp_path):
    from prime_rl.trainer.ckpt import find_checkpoint, save_checkpoint

    model, opt, sched, info = _train_state()
    with small_fs(tmp_path / "fs", "8m") as fs:
        root = fs / "checkpoints"
        save_checkpoint(root, 1, model, opt, sched, {"step": 1}, info)
        fill(fs, leave=256 << 10)  # room for part of step 2's 1.5 MiB (weights + AdamW moments)
        with pytest.raises(DiskFullError) as e:
            save_checkpoint(root, 2, model, opt, sched, {"step": 2}, info)
        assert str(e.value).startswith(f"no space left on device under {root / 'step_2'} (")
        assert not (root / "step_2").exists()  # no `.trainer.tmp/` with an empty `.distcp` left behind
        assert find_checkpoint(root, -1) == root / "step_1" / "trainer"


def test_published_weights_on_a_full_disk_name_the_step_and_leave_no_temporary_folder(tmp_path):
    from prime_rl.transport.atomic import STABLE, atomic_write_dir

    with small_fs(tmp_path / "fs", "2m") as fs:
        target = fs / "weights" / "step_3"
        fill(fs, leave=64 << 10)

        def write(tmp: Path) -> None:  # what publish_weights's fill does: safetensors' own writer
            from safetensors.torch import save_file

            save_file({"w": torch.zeros(256, 1024)}, str(tmp / "model.safetensors"))

        with pytest.raises(DiskFullError) as e:
            atomic_write_dir(target, write, marker=STABLE)
        assert str(e.value).startswith(f"no space left on device under {target} (")
        assert list((fs / "weights").iterdir()) == []


def test_orchestrator_batch_and_traces_on_a_full_disk_name_the_step(tmp_path):
    from prime_rl.orchestrator.outputs import write_step, write_traces
    from prime_rl.transport.batch import MicroBatch, StepBatch

    with small_fs(tmp_path / "fs", "1m") as fs:
        step_dir = fs / "rollouts" / "step_4"
        step_dir.mkdir(parents=True)
        fill(fs, leave=8 << 10)
        with pytest.raises(DiskFullError) as e:
            write_traces(step_dir, [{"messages": "x" * 4096}] * 16)
        assert str(e.value).startswith(f"no space left on device under {step_dir} (")
        n = 16384
        mb = MicroBatch.empty_like(n)
        with pytest.raises(DiskFullError) as e:
            write_step([StepBatch(step=4, rank=0, world_size=1, total_loss_tokens=0, micro_batches=[mb])], step_dir)
        assert str(e.value).startswith(f"no space left on device under {step_dir} (")
        assert list(step_dir.iterdir()) == []  # no `.traces.jsonl.tmp.PID` or `.rank_0.bin.tmp.PID`


def test_the_orchestrator_exits_28_naming_the_folder(tmp_path, monkeypatch, capfd):
    import prime_rl.orchestrator.main as om
    from prime_rl.config.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.outputs import write_traces

    with small_fs(tmp_path / "fs", "1m") as fs:
        step_dir = fs / "run" / "rollouts" / "step_1"
        step_dir.mkdir(parents=True)

        async def main(cfg):  # the orchestrator's step loop, reduced to its traces write
            fill(fs, leave=4 << 10)
            write_traces(step_dir, [{"messages": "x" * 4096}] * 16)

        monkeypatch.setattr(om, "_main", main)
        with pytest.raises(SystemExit) as ex:
            om.orchestrate(OrchestratorConfig(output_dir=fs / "run"))
        logging.getLogger("prime_rl").handlers.clear()
    assert ex.value.code == 28
    assert f"orchestrator: error: no space left on device under {step_dir} (" in capfd.readouterr().err


def test_a_log_file_on_a_full_disk_reports_once_on_stderr(tmp_path, capfd, monkeypatch):
    from prime_rl.monitor.logger import get_logger, setup_logging

    monkeypatch.setenv(diskfull.REASON_ENV, str(tmp_path / "why"))
    with small_fs(tmp_path / "fs", "1m") as fs:
        setup_logging("trainer", fs)  # logs/trainer.log on the small filesystem
        logger = get_logger("trainer")
        try:
            fill(fs)
            for i in range(50):
                logger.info("a line long enough to fill what is left %d %s", i, "x" * 2000)
        finally:
            for h in list(logging.getLogger("prime_rl").handlers):
                logging.getLogger("prime_rl").removeHandler(h)
                h.close()
    err = capfd.readouterr().err
    assert err.count(f"error: no space left on device under {fs / 'logs'} (") == 1, err[-2000:]
    assert "Logging error" not in err and "Traceback" not in err
    assert (tmp_path / "why").read_text().startswith(f"no space left on device under {fs / 'logs'} (")


def test_rl_names_a_child_stopped_by_a_full_disk(tmp_path):
    from prime_rl.launcher.errors import ChildFailed
    from prime_rl.launcher.supervisor import Supervisor
    from prime_rl.process import ChildSpec

    line = describe(tmp_path / "weights" / "step_2")
    code = (f"import os; open(os.environ[{diskfull.REASON_ENV!r}], 'w').write({line!r} + '\\n'); "
            "print('[rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ... cut mid-li', "
            "end=''); raise SystemExit(1)")
    with Supervisor(grace_s=1.0) as sup:
        child = sup.start(ChildSpec("trainer", [sys.executable, "-c", code], tmp_path / "logs" / "trainer.log"))
        child.popen.wait(timeout=60)
        with pytest.raises(ChildFailed) as e:
            sup.check({"trainer"})
    assert str(e.value) == f"trainer stopped: {line} (exit code 1); its log: {tmp_path / 'logs' / 'trainer.log'}"
    assert e.value.exit_code == 28
    assert not sup.reasons.exists()


def test_a_command_on_a_full_disk_exits_28_with_the_reason(tmp_path):
    with small_fs(tmp_path / "fs", "1m") as fs:
        out = fs / "tiny"
        r = subprocess.run([str(BIN / "prime-rl"), "tiny-model", str(out)], capture_output=True, text=True,
                           timeout=300, cwd=REPO)  # fmt: skip
    assert r.returncode == 28, r.stderr[-3000:]
    assert "no space left on device under " in r.stderr and str(fs) in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr


def test_resume_drops_a_temporary_checkpoint_folder_left_behind(tmp_path):
    from prime_rl.launcher import resume
    from prime_rl.monitor.rundir import RunDir

    run = RunDir(tmp_path)
    for part in ("trainer", "orchestrator"):
        (run.checkpoints / "step_2" / part).mkdir(parents=True)
        (run.checkpoints / "step_2" / part / "STABLE").touch()
    tmp = run.checkpoints / "step_2" / ".trainer.tmp" / "dcp"  # a re-save of step 2 cut short
    tmp.mkdir(parents=True)
    (tmp / "__0_0.distcp").touch()
    (run.checkpoints / "step_3" / ".trainer.tmp").mkdir(parents=True)
    assert resume.latest_checkpoint(run) == 2
    gone = resume.drop_steps_after(run, 2)
    assert sorted(gone) == sorted([run.checkpoints / "step_3", run.checkpoints / "step_2" / ".trainer.tmp"])
    assert sorted(p.name for p in (run.checkpoints / "step_2").iterdir()) == ["orchestrator", "trainer"]
