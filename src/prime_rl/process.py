"""Child processes and their health, shared by the `rl` launcher and the inference server's vLLM wrapper.

One supervised child process: its own session (process group), its own log file, and a group-wide stop.

Every child is started with `start_new_session=True`, so its pid is also its process-group id and everything it
forks (torchrun ranks, vLLM engine cores, uvicorn workers) stays in that group unless it calls setsid itself. A
stop signals the whole group (`os.killpg`), waits a grace period, then SIGKILLs the group and every descendant
psutil saw, so no orphan survives. On Linux the child also gets `PR_SET_PDEATHSIG = SIGTERM`: if the launcher is
killed outright, the kernel tells the direct children to stop (the signal follows the thread that started the
child, so start children from a thread that lives as long as they should).

`wait_for_http` polls a child's health URL until it answers 200, the child exits or the timeout passes; callers
turn its two failures into their own errors (the launcher's `ChildFailed`/`LaunchError`, the server's
`ServerStartError`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@dataclass
class ChildSpec:
    """What to start: a name (`inference`, `trainer`, ...), the argv, extra environment and the log path."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None


def _libc():
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc Linux
        return None


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux): an orphaned grandchild (say a vLLM engine core
    whose parent died) is re-parented to us instead of init, so `psutil.Process().children(recursive=True)` still
    finds it at shutdown. Returns whether it worked."""
    libc = _libc()
    if libc is None:
        return False
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _child_preexec() -> None:  # runs in the child between fork and exec
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Child:
    """A started child process. `poll()` returns its exit code or None; `stop()` ends its whole process group."""

    def __init__(self, spec: ChildSpec):
        self.spec = spec
        self.name = spec.name
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        self._logf = open(spec.log, "ab", buffering=0)
        header = f"\n===== prime-rl launcher: starting {spec.name}: {' '.join(spec.argv)}\n"
        self._logf.write(header.encode())
        env = dict(os.environ)
        env.update(spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.popen = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._logf,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=spec.cwd,
            start_new_session=True,
            preexec_fn=_child_preexec,
        )
        self.pid = self.popen.pid
        self.started_at = time.monotonic()
        self._known: dict[int, psutil.Process] = {}
        self.refresh_descendants()

    @property
    def log(self) -> Path:
        return self.spec.log

    def poll(self) -> int | None:
        """Exit code of the child itself (negative: killed by that signal), or None while it runs."""
        return self.popen.poll()

    def refresh_descendants(self) -> None:
        """Remember every process currently below the child (so one whose parent dies can still be found)."""
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for proc in procs:
            try:
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            self._known.setdefault(key[0], proc)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def alive_processes(self) -> list[psutil.Process]:
        """Processes of this child still running: the known descendants plus the process group's members."""
        self.refresh_descendants()
        out = {}
        for pid, proc in list(self._known.items()):
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    out[pid] = proc
            except psutil.Error:
                pass
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == self.pid and proc.status() != psutil.STATUS_ZOMBIE:
                    out[proc.pid] = proc
            except (ProcessLookupError, psutil.Error, OSError):
                pass
        return list(out.values())

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the process group, wait up to `grace_s` seconds, then SIGKILL the group and any descendant
        still running. Descendants outside the group (a server that started its engine in its own session) are
        left to the child's own shutdown during the grace period, unless the child is already gone. Returns the
        child's exit code. Never raises for processes already gone."""
        self.refresh_descendants()
        if self.poll() is None or self._group_alive():
            self._signal_group(signal.SIGTERM)
            if self.poll() is not None:
                # the leader is gone, so nobody will pass the stop on to what it started outside its group
                for proc in self.alive_processes():
                    try:
                        proc.terminate()
                    except psutil.Error:
                        pass
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                if self.poll() is not None and not self.alive_processes():
                    break
                time.sleep(0.1)
        survivors = self.alive_processes()
        if survivors or self._group_alive():
            self._signal_group(signal.SIGKILL)
            for proc in survivors:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            # never psutil-wait our own child: that reaps it and Popen would report exit code 0
            psutil.wait_procs([p for p in survivors if p.pid != self.pid], timeout=5.0)
        try:
            self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        try:
            self._logf.close()
        except OSError:
            pass
        return self.popen.returncode

    def tail(self, lines: int = 20) -> str:
        """The last `n` lines of the child's log (what it printed to stdout and stderr)."""
        return tail_file(self.spec.log, lines)


def tail_file(path: Path, lines: int = 20) -> str:
    """Last `n` lines of a text file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(deque(data.splitlines(), maxlen=lines))


def describe_exit(code: int | None) -> str:
    """`exit code 3`, `killed by SIGKILL`, or `still running`."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether `GET url` answers 200 within `timeout_s` seconds (any error counts as no)."""
    try:
        resp = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


def http_json(url: str, timeout_s: float = 2.0) -> dict | None:
    """`GET url` as a JSON object, or None on any error or non-object answer."""
    try:
        resp = httpx.get(url, timeout=timeout_s)
        if resp.status_code != 200:
            return None
        data = resp.json()
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ChildExited(RuntimeError):
    """The child exited while we waited for its health URL; `code` is its exit code."""

    def __init__(self, code: int, url: str):
        super().__init__(f"exited ({describe_exit(code)}) before {url} answered 200")
        self.code, self.url = code, url


def wait_for_http(url: str, child: Child | subprocess.Popen | None, timeout_s: float, interval_s: float = 0.5,
                  on_tick: Callable[[float], None] | None = None) -> float:  # fmt: skip
    """Poll `GET url` every `interval_s` until it answers 200; return the seconds waited. `on_tick(elapsed_s)` is
    called after each poll (a progress display).

    Raises:
        ChildExited: `child` (a `Child` or a `Popen`; None: no process to watch) exited first.
        TimeoutError: no 200 within `timeout_s` seconds (the caller names what it waited for and where to look).
    """
    t0 = time.monotonic()
    while True:
        if http_ok(url, timeout_s=min(2.0, max(0.2, interval_s * 4))):
            return time.monotonic() - t0
        code = child.poll() if child is not None else None
        if code is not None:
            raise ChildExited(code, url)
        if on_tick is not None:
            on_tick(time.monotonic() - t0)
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"no 200 from {url} within {timeout_s:.0f} s")
        time.sleep(interval_s)
