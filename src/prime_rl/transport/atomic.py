"""Atomic publishing of files and directories (docs/design.md invariant 4): temporary name, fsync, rename."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from prime_rl.diskfull import guard

STABLE = "STABLE"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees either nothing or the whole file. On a full disk the temporary
    file is removed and `prime_rl.diskfull.DiskFullError` names `path`'s folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with guard(path.parent), open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written stays behind (a full disk: DiskFullError)
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_dir(path: Path, fill: Callable[[Path], None], marker: str | None = STABLE) -> Path:
    """Create directory `path` atomically: `fill(tmpdir)` writes into a temporary sibling, which is renamed.

    When `marker` is given, an empty file of that name is written last (after the rename) so that readers that
    wait for the marker never see a partial directory. An existing `path` is replaced. On any error the temporary
    directory is removed; a full disk raises `prime_rl.diskfull.DiskFullError` naming `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with guard(path):
            fill(tmp)
            publish_filled_dir(tmp, path, marker)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def publish_filled_dir(tmp: Path, path: Path, marker: str | None = STABLE) -> Path:
    """Publish an already-filled temporary directory `tmp` as `path`: fsync every file, replace `path` by a rename,
    then write the `marker` file last. For writers that fill `tmp` themselves (e.g. several ranks, collectively)."""
    tmp, path = Path(tmp), Path(path)
    for entry in tmp.rglob("*"):
        if entry.is_file():
            with open(entry, "rb") as f:
                os.fsync(f.fileno())
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    if marker:
        atomic_write_bytes(path / marker, b"")
    return path
