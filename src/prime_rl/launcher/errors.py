"""Launcher errors; each carries the message for the user and the exit status `rl` ends with."""

from __future__ import annotations

from pathlib import Path

from prime_rl.process import describe_exit


class LaunchError(RuntimeError):
    """The run cannot start or continue; the message says why and what to do. Exit status 1."""

    exit_code = 1


class PreflightError(LaunchError):
    """A check before starting anything failed (port taken, model or data missing, bad sizes). Exit status 2."""

    exit_code = 2


class ChildFailed(LaunchError):
    """A child process exited when it should not have. With `reason` (a full disk: `prime_rl.diskfull`), the
    message is that reason instead of the log's tail, and the exit status is the reason's (`exit_code`)."""

    def __init__(self, name: str, code: int | None, log: Path, tail: str, when: str = "",
                 reason: str | None = None, exit_code: int | None = None):  # fmt: skip
        self.name, self.code, self.log, self.tail, self.reason = name, code, log, tail, reason
        if exit_code is not None:
            self.exit_code = exit_code
        when = f" {when}" if when else ""
        if reason is not None:
            super().__init__(f"{name} stopped: {reason} ({describe_exit(code)}); its log: {log}")
            return
        indented = "\n".join("    " + line for line in tail.splitlines()) or "    (log is empty)"
        super().__init__(f"{name} died ({describe_exit(code)}){when}. Last lines of {log}:\n{indented}")


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; the launcher stops everything and exits 128 + signal number."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signum)

    @property
    def signal_name(self) -> str:
        """`SIGINT`, `SIGTERM` or `signal N`."""
        return "SIGINT" if self.signum == 2 else "SIGTERM" if self.signum == 15 else f"signal {self.signum}"
