"""Supervising a set of children: start, watch, and stop them all in a fixed order, whatever happens.

The supervision rule of `rl`: the run is done when every *finisher* (trainer and orchestrator) has exited 0. Any
other exit (a finisher with a non-zero code, or a server exiting at all) is a failure naming the child and the
tail of its log; a child stopped by a full disk is named with its one-line reason instead (`prime_rl.diskfull`:
read from the reason file each child gets through `$PRIME_RL_REASON_FILE`, outside the run directory), and `rl`
exits 28. SIGINT/SIGTERM stop everything. In every case all children are stopped, orchestrator first,
env-server last, each whole process group SIGTERMed then SIGKILLed after a grace period.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from prime_rl import diskfull
from prime_rl.launcher.errors import ChildFailed, Interrupted, LaunchError
from prime_rl.process import Child, ChildSpec, become_subreaper, describe_exit

STOP_ORDER = ("orchestrator", "trainer", "inference", "env-server")

log = logging.getLogger("prime_rl.rl")


def describe_stop(code: int | None, grace_s: float) -> str:
    """How a child that `rl` stopped (`Child.stop`: SIGTERM, SIGKILL after `grace_s` seconds) ended: `SIGTERM from
    rl at the end of the run`, `SIGKILL from rl after 10s`, `exit code 0`, or `gone`."""
    if code == -signal.SIGTERM:
        return "SIGTERM from rl at the end of the run"
    if code == -signal.SIGKILL:
        return f"SIGKILL from rl after {grace_s:g}s"
    return describe_exit(code) if code is not None else "gone"


class Supervisor:
    """Owns the children of one run. Use as a context manager: leaving it (normally or by any exception,
    including `Interrupted`) stops every child and checks with psutil that none of their processes survives."""

    def __init__(self, grace_s: float = 10.0, stop_order: tuple[str, ...] = STOP_ORDER):
        self.grace_s = grace_s
        self.stop_order = stop_order
        self.children: dict[str, Child] = {}
        self.finished: set[str] = set()
        self.expendable: set[str] = set()  # e.g. inference replicas: one may die while another of them runs
        self.lost: set[str] = set()
        # each child writes why it stopped on a full disk here, outside the run directory (prime_rl.diskfull)
        self.reasons = Path(tempfile.mkdtemp(prefix="prime-rl-reasons-"))
        become_subreaper()

    def reason_file(self, name: str) -> Path:
        """Where child `name` writes its disk-full reason (`$PRIME_RL_REASON_FILE`)."""
        return self.reasons / f"{name}.reason"

    def start(self, spec: ChildSpec) -> Child:
        if spec.name in self.children:
            raise ValueError(f"child {spec.name!r} already started")
        spec.env = {**spec.env, diskfull.REASON_ENV: str(self.reason_file(spec.name))}
        child = Child(spec)
        self.children[spec.name] = child
        log.info(f"started {spec.name} (pid {child.pid}), log: {spec.log}")
        return child

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    def check(self, finishers: set[str]) -> None:
        """Raise `ChildFailed` for the first child that exited when it should not have; record finishers done."""
        for name, child in self.children.items():
            if name in self.finished or name in self.lost:
                continue
            code = child.poll()
            if code is None:
                continue
            if code == 0 and name in finishers:
                self.finished.add(name)
                log.info(f"{name} finished (exit code 0)")
                continue
            alive = [n for n in self.expendable - self.lost - {name} if self.children.get(n) and self.children[n].poll() is None]
            if name in self.expendable and alive:
                self.lost.add(name)
                log.warning(f"{name} died ({describe_exit(code)}); the run goes on with {', '.join(sorted(alive))} "
                            f"(the orchestrator stops sending it requests). Last lines of {child.log}:\n{child.tail(10)}")
                continue
            when = "unexpectedly" if code == 0 else ""
            tail = child.tail()
            full = diskfull.child_reason(self.reason_file(name), tail, code, child.log.parent)
            raise ChildFailed(name, code, child.log, tail, when, reason=full,
                              exit_code=diskfull.EXIT_CODE if full else None)  # fmt: skip

    def refresh(self) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.refresh_descendants()

    def stop_all(self) -> list[psutil.Process]:
        """Stop every child in `stop_order` (then any others, newest first). Returns the processes that survived
        even SIGKILL (normally none; they are logged as errors)."""
        names = [n for n in self.stop_order if n in self.children]
        names += [n for n in reversed(list(self.children)) if n not in names]
        with deferred_signals():
            for name in names:
                child = self.children[name]
                running = child.poll() is None
                code = child.stop(self.grace_s)
                if running:
                    log.info(f"stopped {name} ({describe_stop(code, self.grace_s)})")
            survivors = [p for c in self.children.values() for p in c.alive_processes()]
        for proc in survivors:
            log.error(f"process {proc.pid} survived the stop of the run")
        shutil.rmtree(self.reasons, ignore_errors=True)
        return survivors

    def wait_done(
        self,
        finishers: set[str],
        on_tick: Callable[[], None] | None = None,
        finish_timeout_s: float = 1800.0,
        interval_s: float = 0.2,
    ) -> None:
        """Block until every finisher exited 0; call `on_tick` about every `interval_s` seconds.

        Raises:
            ChildFailed: a child exited when it should not have.
            LaunchError: one finisher exited 0 but another did not follow within `finish_timeout_s` seconds.
            Interrupted: SIGINT/SIGTERM (with `handle_signals`).
        """
        first_done: float | None = None
        last_refresh = 0.0
        while True:
            self.check(finishers)
            if on_tick is not None:
                on_tick()
            if finishers <= self.finished:
                return
            now = time.monotonic()
            if self.finished & finishers and first_done is None:
                first_done = now
            if first_done is not None and now - first_done > finish_timeout_s:
                waiting = sorted(finishers - self.finished)
                logs = ", ".join(str(self.children[n].log) for n in waiting if n in self.children)
                raise LaunchError(
                    f"{', '.join(sorted(self.finished))} finished but {', '.join(waiting)} did not exit within "
                    f"{finish_timeout_s:.0f} s; see {logs}"
                )
            if now - last_refresh > 5.0:
                self.refresh()
                last_refresh = now
            time.sleep(interval_s)


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` (restored after). Main thread only."""
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Within the block, SIGINT/SIGTERM are recorded instead of interrupting (so a second Ctrl-C cannot cut a
    shutdown short and leave processes behind). Outside the main thread this does nothing."""
    got: list[int] = []
    try:
        old = {s: signal.signal(s, lambda n, f: got.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield got
        return
    try:
        yield got
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def exit_status(body: Callable[[], object], logger: logging.Logger, stopped: str = "stopped every process of the run",
                prefix: str = "") -> int:
    """Run `body()` with SIGINT/SIGTERM raising `Interrupted`; return the launcher's exit status: 0 when it
    returned, 128 + the signal number on SIGINT/SIGTERM (logged as a warning: `<prefix><signal> received: <stopped>`), or a
    `LaunchError`'s code (its message logged as an error: 1 a process failed, 2 a pre-flight check). Any other
    exception propagates with its traceback."""
    try:
        with handle_signals():
            body()
        return 0
    except Interrupted as e:
        logger.warning(f"{prefix}{e.signal_name} received: {stopped}")
        return 128 + e.signum
    except LaunchError as e:
        logger.error(str(e))
        return e.exit_code
