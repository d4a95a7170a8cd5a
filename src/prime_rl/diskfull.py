"""A full disk, named: every process of a run turns a write failing with `ENOSPC` (no space left on device) or
`EDQUOT` (disk quota exceeded) into one line, `no space left on device under PATH (F free of T)`, and exit code 28
(`EXIT_CODE`, ENOSPC's errno).

- `guard(path)` wraps a write into `path` (a checkpoint, a weights folder, a batch file, traces): a disk-full error
  inside it, however wrapped (torch.distributed.checkpoint's `CheckpointException`, safetensors' Rust error that
  only says "No space left on device", an exception chained from it), is raised again as `DiskFullError(path)`.
- `exit_on_disk_full(fallback)` (used by every command, `prime_rl.cli.command.Command`) ends the process with
  `EXIT_CODE` after `report`, which writes the line to stderr, the `prime_rl` log and the file named by the
  environment variable `PRIME_RL_REASON_FILE`. `rl` sets that variable for each child to a file outside the run
  directory, so the reason reaches `rl` even when the child's own log is on the full disk (`child_reason`).
- `DiskFullFileHandler`: a log file handler that, when its own write fails on a full disk, reports the reason
  once (stderr, reason file) and stops writing to the file instead of printing a logging traceback per record.

`describe(path)` measures free space with `shutil.disk_usage` on the nearest existing folder of `path`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

EXIT_CODE = 28  # errno.ENOSPC
REASON_ENV = "PRIME_RL_REASON_FILE"
_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# messages of errors that carry no errno: safetensors (Rust io::Error), torch's C++ writers, wrapped OSErrors
_TEXTS = re.compile(r"no space left on device|disk quota exceeded|os error (?:28|122)\b|errno (?:28|122)\b", re.I)
# a write that stopped short without an errno (torch's zip writer: `unexpected pos 704 vs 598`, `file write failed`)
_SHORT_WRITE = re.compile(r"unexpected pos \d+ vs \d+|file write failed|failed writing file", re.I)
LINE_RE = re.compile(r"no space left on device under \S.*? \([^()]*(?:free of|unknown)[^()]*\)")


class DiskFullError(RuntimeError):
    """A write under `path` failed because its filesystem is full (or the quota is used up). The message is
    `describe(path)`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        super().__init__(describe(self.path))


def _size(num_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes} B"


def _existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def describe(path: str | os.PathLike) -> str:
    """`no space left on device under PATH (F free of T)`: free and total size of the filesystem holding `path`
    (its nearest existing folder; sizes unknown when that cannot be measured either)."""
    path = Path(path).absolute()
    try:
        usage = shutil.disk_usage(_existing(path))
        space = f"{_size(usage.free)} free of {_size(usage.total)}"
    except OSError:
        space = "free space unknown"
    return f"no space left on device under {path} ({space})"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception behind it: causes, contexts, exception-group members, and the per-rank failures of
    torch.distributed.checkpoint's `CheckpointException` (`{rank: (exception, traceback)}`)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        cause = todo.pop()
        if cause is None or id(cause) in seen or not isinstance(cause, BaseException):
            continue
        seen.add(id(cause))
        yield cause
        todo += [cause.__cause__, cause.__context__]
        todo += list(getattr(cause, "exceptions", None) or ())
        failures = getattr(cause, "failures", None)
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) and f else f for f in failures.values()]


def disk_full_cause(exc: BaseException) -> BaseException | None:
    """The exception behind `exc` that says the disk is full (a `DiskFullError` first), or None."""
    found = None
    for cause in _causes(exc):
        if isinstance(cause, DiskFullError):
            return cause
        if found is None and (
            (isinstance(cause, OSError) and cause.errno in _ERRNOS) or _TEXTS.search(str(cause) if cause.args else "")
        ):
            found = cause
    return found


def is_disk_full(exc: BaseException) -> bool:
    """True when `exc`, or an exception behind it, is a full disk or an exceeded quota."""
    return disk_full_cause(exc) is not None


def reason(exc: BaseException, fallback: str | os.PathLike | None = None) -> str | None:
    """The one-line reason for a disk-full `exc` (None when it is not one): the `DiskFullError`'s message, or
    `describe` of the failing file's folder, or of `fallback` (e.g. the run directory) when the error names no
    file."""
    cause = disk_full_cause(exc)
    if cause is None:
        return None
    if isinstance(cause, DiskFullError):
        return str(cause)
    name = getattr(cause, "filename", None)
    if name:
        return describe(Path(os.fsdecode(name)).parent)
    return describe(fallback if fallback is not None else os.getcwd())


@contextlib.contextmanager
def guard(path: str | os.PathLike) -> Iterator[None]:
    """Within the block, a disk-full error (however wrapped) is raised as `DiskFullError(path)`, chained to it; so is
    any other error while the filesystem of `path` has under 1 MiB free, and a write that stopped short without an
    errno (torch's zip writer: `unexpected pos 704 vs 598`, `file write failed`) while it has under 64 MiB or 5% free:
    such writers drop the errno, and the failed write may leave more than 1 MiB that the next write needed."""
    try:
        yield
    except DiskFullError:
        raise
    except BaseException as e:
        if is_disk_full(e) or (_is_failure(e) and (_nearly_full(path) or (_short_write(e) and _low(path)))):
            raise DiskFullError(path) from e
        raise


def _is_failure(exc: BaseException) -> bool:
    """An error, not an interruption: torch.distributed.checkpoint's `CheckpointException` derives from
    `BaseException`, so "is an `Exception`" would miss every failure it wraps."""
    return not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)) and type(exc).__name__ != "CancelledError"


def _nearly_full(path: str | os.PathLike) -> bool:
    try:
        return shutil.disk_usage(_existing(Path(path))).free < (1 << 20)
    except OSError:
        return False


def _short_write(exc: BaseException) -> bool:
    """Whether `exc` or an exception behind it is a write that stopped short without an errno."""
    return any(_SHORT_WRITE.search(str(e)) for e in _causes(exc) if e.args)


def _low(path: str | os.PathLike) -> bool:
    """Under 64 MiB or 5% of its size free on the filesystem of `path`: where a short write means a full disk (a
    short write with room to spare is some other I/O failure, reported as itself)."""
    try:
        usage = shutil.disk_usage(_existing(Path(path)))
    except OSError:
        return False
    return usage.free < max(64 << 20, usage.total // 20)


def _write_stderr(text: str) -> None:
    try:
        os.write(2, text.encode(errors="replace"))
    except OSError:
        pass


def write_reason_file(line: str) -> None:
    """Write `line` to the file named by `$PRIME_RL_REASON_FILE` (set by `rl` for its children); never raises."""
    target = os.environ.get(REASON_ENV)
    if not target:
        return
    try:
        with open(target, "w") as f:
            f.write(line + "\n")
    except OSError:
        pass


_reporting = False


def report(line: str, prog: str | None = None) -> None:
    """Make the reason `line` seen: stderr (written directly, so a failing log handler cannot hide it), the
    reason file and the `prime_rl` logger (whose file handler may itself fail on the full disk)."""
    global _reporting
    prefix = f"{prog}: error: " if prog else "error: "
    _write_stderr(prefix + line + "\n")
    write_reason_file(line)
    _reporting = True
    try:
        logger = logging.getLogger("prime_rl")
        for handler in logger.handlers:  # file handlers only: the console handler would repeat the stderr line
            if isinstance(handler, logging.FileHandler):
                with contextlib.suppress(Exception):
                    handler.handle(logger.makeRecord("prime_rl", logging.ERROR, __file__, 0, line, (), None))
    finally:
        _reporting = False


@contextlib.contextmanager
def exit_on_disk_full(fallback: str | os.PathLike | None = None, prog: str | None = None) -> Iterator[None]:
    """Within the block, a disk-full error (not a `SystemExit`) is reported (`report`) and ends the process with
    `SystemExit(EXIT_CODE)`; `fallback` is the folder named when the error names no file."""
    try:
        yield
    except SystemExit:
        raise
    except BaseException as e:
        line = reason(e, fallback)
        if line is None:
            raise
        report(line, prog)
        raise SystemExit(EXIT_CODE) from None


class DiskFullFileHandler(logging.FileHandler):
    """`logging.FileHandler` that, when a write of its own fails on a full disk, reports the reason once (stderr
    and the reason file, as `report`) and stops writing to the file; other errors go to `handleError` as usual."""

    def __init__(self, filename: str | os.PathLike, *args, **kwargs):
        super().__init__(filename, *args, **kwargs)
        self.full: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.full is not None:
            return
        try:
            super().emit(record)  # logging.StreamHandler.emit sends its own errors to handleError
            if self.stream is not None:
                self.stream.flush()
        except Exception:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        exc_value = sys.exc_info()[1]
        if exc_value is None or not is_disk_full(exc_value):
            super().handleError(record)
            return
        if self.full is None:
            self.full = describe(Path(self.baseFilename).parent)
            if not _reporting:
                _write_stderr(f"error: {self.full} (writing the log {self.baseFilename}; it ends here)\n")
                write_reason_file(self.full)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()


def child_reason(reason_file: str | os.PathLike | None, tail: str, code: int | None,
                 folder: str | os.PathLike) -> str | None:  # fmt: skip
    """For `rl`: the disk-full reason of a child that exited with `code`, or None when it did not fail on a full
    disk. Taken from the child's reason file, else from a `no space left on device under ...` line in its log
    `tail`, else (exit code `EXIT_CODE`, or the tail mentions a full disk) `describe(folder)`."""
    if reason_file is not None:
        try:
            text = Path(reason_file).read_text().strip()
        except OSError:
            text = ""
        if text:
            return text.splitlines()[0]
    found = LINE_RE.findall(tail)
    if found:
        return found[-1]
    if code == EXIT_CODE or _TEXTS.search(tail):
        return describe(folder)
    return None
