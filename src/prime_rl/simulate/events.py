"""The discrete-event clock: a time-ordered queue of callbacks, ties broken by insertion order (deterministic)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable


class EventQueue:
    """Callbacks at simulated times (seconds). `at(t, fn)` schedules `fn()` at `t`; `run(until)` runs them in time
    order (equal times in the order they were scheduled) until the queue is empty or `until()` is true."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.processed = 0

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Schedule `fn` at time `when` (not before now). Raises ValueError for a time in the past."""
        if when < self.now - 1e-12:
            raise ValueError(f"event at {when} is before the clock ({self.now})")
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), fn))

    def after(self, dt: float, fn: Callable[[], None]) -> None:
        """Schedule `fn` `dt` seconds from now."""
        self.at(self.now + dt, fn)

    def run(self, until: Callable[[], bool], max_events: int = 50_000_000) -> None:
        """Process events until `until()` holds or none is left. Raises RuntimeError past `max_events` (a model
        that never reaches its end)."""
        while self._heap and not until():
            when, _, fn = heapq.heappop(self._heap)
            self.now = when
            fn()
            self.processed += 1
            if self.processed > max_events:
                raise RuntimeError(f"simulation stopped after {max_events} events without finishing")
