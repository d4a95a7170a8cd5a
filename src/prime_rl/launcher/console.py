"""Console view of a run: the orchestrator's step and eval lines, streamed from its log, above a progress bar over
steps."""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

STEP_RE = re.compile(r"(?:^|[\s\]|:])(Step (\d+)(?:/\d+)? \|.*)$")
EVAL_RE = re.compile(r"(?:^|[\s\]|:])(Eval policy (\d+) \|.*)$")
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def parse_eval_line(line: str) -> tuple[int, str] | None:
    """`(N, "Eval policy N | ...")` when `line` carries an orchestrator eval result, else None."""
    match = EVAL_RE.search(ANSI_RE.sub("", line.rstrip("\r\n")))
    return None if match is None else (int(match.group(2)), match.group(1))


def parse_step_line(line: str) -> tuple[int, str] | None:
    """`(N, "Step N | ...")` when `line` carries an orchestrator step line (after any log prefix), else None."""
    match = STEP_RE.search(ANSI_RE.sub("", line.rstrip("\r\n")))
    if match is None:
        return None
    return int(match.group(2)), match.group(1)


class LogTail:
    """Reads the complete lines appended to a file since the last call (the file may not exist yet)."""

    def __init__(self, path: Path, from_end: bool = True):
        self.path = Path(path)
        self.pos = self.path.stat().st_size if (from_end and self.path.exists()) else 0
        self._partial = b""

    def read_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        self.pos += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [ln.decode(errors="replace") for ln in lines]


class StepView:
    """Prints each new step (and eval) line of the orchestrator log and advances a rich progress bar to that step.

    `total` is max_steps (None: no bar total). `start` is the step the run resumes from (0 for a fresh run).
    """

    def __init__(self, log: Path, total: int | None, start: int = 0, console: Console | None = None):
        self.tail = LogTail(log)
        self.console = console or Console(stderr=True, highlight=False)
        self.progress = Progress(
            TextColumn("[bold]steps"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.task = self.progress.add_task("steps", total=total, completed=start)
        self.last_step = start
        self.lines: list[str] = []
        self.printed: set[int] = set()

    def __enter__(self) -> StepView:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.poll()
        self.progress.stop()

    def poll(self) -> None:
        for raw in self.tail.read_lines():
            ev = parse_eval_line(raw)
            if ev is not None and -1 - ev[0] not in self.printed:  # eval of version N keyed as -1 - N
                self.printed.add(-1 - ev[0])
                self.lines.append(ev[1])
                self.progress.console.print(ev[1], markup=False, highlight=False, soft_wrap=True)
                continue
            parsed = parse_step_line(raw)
            if parsed is None:
                continue
            step, text = parsed
            if step in self.printed:  # the same line on stdout and through the logger
                continue
            self.printed.add(step)
            self.lines.append(text)
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
            if step > self.last_step:
                self.last_step = step
                self.progress.update(self.task, completed=step)
