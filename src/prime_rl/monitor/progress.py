"""Progress of long loops: a rich bar (count/total, elapsed, ETA) on a terminal, plain log lines elsewhere.

    with Progress("rendering", total=len(rows), unit="conversations") as p:
        for row in rows:
            ...
            p.advance()

On a terminal (stderr is a TTY) a rich progress bar is drawn on stderr, and the process's log lines are printed
above it while it runs (the console log handlers are pointed at the bar's console, so nothing garbles it). When
stderr is not a terminal (a log file, a pipe, CI), no bar is drawn: a log line `rendering 120/6171 conversations
(2%), 4 s elapsed, eta 3m 21s` is written at most every `log_every_s` seconds, and one at the end.
`PRIME_RL_PROGRESS=bar|log|off` overrides the choice.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from prime_rl.monitor.logger import get_logger


def format_duration(seconds: float) -> str:
    """`1h 2m 3s`, `1m 23s`, `42s` (whole seconds)."""
    secs = int(round(max(0.0, seconds)))
    hours, rem = divmod(secs, 3600)
    minutes, secs = divmod(rem, 60)
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def step_line(step: int, max_steps: int | None, parts: list[str]) -> str:
    """The one console line of a training step, trainer and orchestrator alike: `Step 12/50 | Part | Part`
    (`Step 12 | ...` without `max_steps`). Each part reads `Title value` (`Reward 0.7508`, `Loss 0.0123`)."""
    of = f"/{max_steps}" if max_steps else ""
    return " | ".join([f"Step {step}{of}", *parts])


_ACRONYMS = {"kl": "KL", "lr": "LR", "se": "SE", "tis": "TIS"}


def metric_title(key: str) -> str:
    """A metric's name as a step line's label: `grad_norm` -> `Grad Norm`, `mismatch_kl` -> `Mismatch KL`."""
    words = key.replace("/", " ").replace("_", " ").split()
    return " ".join(_ACRONYMS.get(w, w.capitalize()) for w in words)


def eta_seconds(done: float, total: float | None, elapsed: float) -> float | None:
    """Remaining seconds at the mean rate so far (`elapsed / done * (total - done)`), or None when unknown."""
    if total is None or done <= 0 or elapsed <= 0:
        return None
    return elapsed / done * max(0.0, total - done)


def mean_rate_eta_column(start: float = 0) -> Any:
    """A rich progress column: the remaining time at the mean rate since the bar started (`eta_seconds` of the
    count above `start`), `-` until one item is done, empty once finished. rich's own `TimeRemainingColumn` uses
    the rate of the last 30 s, which a burst of items finishing together (concurrent rollouts) turns into a
    near-zero ETA that stays until the next burst."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class MeanRateRemaining(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.total is None or task.finished:
                return Text("")
            eta = eta_seconds(task.completed - start, task.total - start, task.elapsed or 0.0)
            return Text("-" if eta is None else format_duration(eta), style="progress.remaining")

    return MeanRateRemaining()


def mode() -> str:
    """`bar` on a terminal, else `log`; `PRIME_RL_PROGRESS` (bar, log, off) overrides; `off` on every torchrun rank
    but 0 (one process reports)."""
    if int(os.environ.get("RANK", "0") or 0) != 0:
        return "off"
    forced = os.environ.get("PRIME_RL_PROGRESS", "").strip().lower()
    if forced in ("bar", "log", "off"):
        return forced
    return "bar" if sys.stderr.isatty() else "log"


class Progress:
    """One counted loop. `total` may be None (count and elapsed only). `unit` names what is counted.

    `log` is the logger of the log-line mode (default `prime_rl.progress`). `show_eta=False` for a bound rather
    than a goal (a timeout as the total of a wait: the ETA would only say when it gives up).
    """

    def __init__(self, description: str, total: float | None, unit: str = "", start: float = 0,
                 log: logging.Logger | None = None, log_every_s: float = 10.0, show_eta: bool = True):  # fmt: skip
        self.description, self.total, self.unit, self.show_eta = description, total, unit, show_eta
        self.done = start
        self.start = start
        self.log = log or get_logger("progress")
        self.log_every_s = log_every_s
        self.mode = mode()
        self._bar: Any = None
        self._task: Any = None
        self._swapped: list[tuple[logging.StreamHandler, Any]] = []
        self._t0 = 0.0
        self._last_log = 0.0

    # ---- life cycle ----
    def __enter__(self) -> Progress:
        self._t0 = self._last_log = time.monotonic()
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            console = Console(stderr=True, highlight=False)
            eta = [TextColumn("eta"), mean_rate_eta_column(self.start)] if self.show_eta else []
            self._bar = Bar(
                TextColumn(f"[bold]{self.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn(self.unit), TimeElapsedColumn(), *eta,
                console=console, transient=False, redirect_stdout=False, redirect_stderr=False,
            )  # fmt: skip
            self._task = self._bar.add_task(self.description, total=self.total, completed=self.done)
            self._bar.start()
            self._route_logs(console)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.stop()
            for handler, stream in self._swapped:
                handler.setStream(stream)
            self._swapped.clear()
        elif self.mode == "log" and exc_type is None:
            self._log_line(final=True)

    def _route_logs(self, console: Any) -> None:
        """Console log handlers write through the bar's console while it is drawn (lines above the bar)."""

        class _ToConsole:
            def write(self, text: str) -> int:
                console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
                return len(text)

            def flush(self) -> None:
                pass

        target = _ToConsole()
        for logger in (logging.getLogger("prime_rl"), logging.getLogger()):
            for handler in logger.handlers:
                to_stderr = getattr(handler, "stream", None) in (sys.stderr, sys.__stderr__)
                if type(handler) is logging.StreamHandler and to_stderr:
                    self._swapped.append((handler, handler.setStream(target)))

    # ---- counting ----
    def advance(self, amount: float = 1) -> None:
        self.update(self.done + amount)

    def update(self, done: float, total: float | None = None) -> None:
        """Set the count (and, optionally, a new total)."""
        self.done = done
        if total is not None:
            self.total = total
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.total)
        elif self.mode == "log" and time.monotonic() - self._last_log >= self.log_every_s:
            self._log_line()

    def line(self) -> str:
        """`description done/total unit (pct%), Xs elapsed, eta Ys` (what the log mode writes)."""
        elapsed = time.monotonic() - self._t0
        count = f"{self.done:g}" + (f"/{self.total:g}" if self.total is not None else "")
        text = f"{self.description} {count}" + (f" {self.unit}" if self.unit else "")
        if self.total:
            text += f" ({100.0 * self.done / self.total:.0f}%)"
        text += f", {format_duration(elapsed)} elapsed"
        eta = eta_seconds(self.done - self.start, None if self.total is None else self.total - self.start, elapsed)
        if self.show_eta and eta is not None and self.done < (self.total or 0):
            text += f", eta {format_duration(eta)}"
        return text

    def _log_line(self, final: bool = False) -> None:
        self._last_log = time.monotonic()
        self.log.info(self.line() + (" (done)" if final else ""))
