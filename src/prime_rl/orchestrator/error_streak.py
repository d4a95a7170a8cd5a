"""Stop a run on a streak of errored rollouts (`orchestrator.max_consecutive_errors`, `orchestrator.max_error_rate`).

A broken environment or inference server masks every rollout; without a cap the run keeps sampling until
`max_empty_steps` empty steps have passed. `ErrorStreak` sees every train rollout as its group is collected (the
scheduler feeds it, in completion order) and trips when

- `max_consecutive_errors` rollouts in a row were masked (`Rollout.masked`, with `error_kind`/`error_message`), or
- more than `max_error_rate` of the last `error_rate_window` rollouts were (checked once the window is full).

The scheduler's `next_batch` then raises `ErrorStreakError` and the orchestrator exits 1 with a message listing the
last few error kinds and messages per source. Filtered rollouts (zero advantage, truncated) are not errors.
"""

from __future__ import annotations

from collections import Counter, deque

from prime_rl.orchestrator.types import Rollout


class ErrorStreakError(RuntimeError):
    """Too many rollouts in a row (or too large a share of the recent ones) were masked; the message names the
    limit that tripped, the counts by error kind and the last few errors of each source."""


class ErrorStreak:
    """Counts masked rollouts in completion order; `observe` returns the error message once a limit trips.

    Args:
        max_consecutive: stop after this many masked rollouts in a row (None: no cap).
        max_rate: stop when more than this fraction (0..1] of the last `window` rollouts were masked (None: off).
        window: rollouts in the rate's window.
        keep: errors remembered per source for the message.
    """

    def __init__(self, max_consecutive: int | None, max_rate: float | None = None, window: int = 64, keep: int = 3):
        self.max_consecutive, self.max_rate, self.window = max_consecutive, max_rate, window
        self.streak = 0
        self.recent: deque[str | None] = deque(maxlen=window)  # error kind, None when not masked
        self.kinds: Counter = Counter()  # error kinds of the current streak
        self.last: dict[str, deque[str]] = {}  # source -> its last `keep` errors
        self.keep = keep
        self.tripped: str | None = None

    @property
    def enabled(self) -> bool:
        return self.max_consecutive is not None or self.max_rate is not None

    def observe(self, rollouts: list[Rollout]) -> str | None:
        """Count `rollouts` (one collected group, in order); the stop message when a limit trips (and on every later
        call), else None."""
        for rollout in rollouts:
            if self.tripped is not None:
                break
            self.recent.append((rollout.error_kind or "unknown") if rollout.masked else None)
            if rollout.masked:
                self.streak += 1
                self.kinds[rollout.error_kind or "unknown"] += 1
                self.last.setdefault(rollout.source, deque(maxlen=self.keep)).append(rollout.error or "unknown")
            else:
                self.streak = 0
                self.kinds.clear()
            self.tripped = self._check()
        return self.tripped

    def _check(self) -> str | None:
        if self.max_consecutive is not None and self.streak >= self.max_consecutive:
            head = (f"{self.streak} consecutive rollouts masked (orchestrator.max_consecutive_errors = "
                    f"{self.max_consecutive})")  # fmt: skip
            return self._message(head, self.kinds)
        if self.max_rate is not None and len(self.recent) == self.window:
            kinds = Counter(k for k in self.recent if k is not None)
            num_masked = sum(kinds.values())
            if num_masked / self.window > self.max_rate:
                head = (f"{num_masked} of the last {self.window} rollouts masked "
                        f"({100 * num_masked / self.window:.0f}% > "
                        f"orchestrator.max_error_rate = {self.max_rate:g} over orchestrator.error_rate_window)")
                return self._message(head, kinds)
        return None

    def _message(self, head: str, kinds: Counter) -> str:
        by_kind = ", ".join(f"{k} {v}" for k, v in kinds.most_common()) or "see below"
        per_source = "; ".join(f"source {s!r}: " + " | ".join(errs) for s, errs in self.last.items())
        return (
            f"{head}; error kinds: {by_kind}. Last errors per source: {per_source}. The environment, "
            "its verify or the inference server fails every rollout: see logs/orchestrator.log and "
            "rollouts/step_N/traces.jsonl; raise the limit or set it to None to keep sampling"
        )
