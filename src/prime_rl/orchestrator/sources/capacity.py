"""Per-source concurrency: a source may cap how many of its episodes run at once (`TaskSource.capacity`, e.g. a
resources server's `--max-concurrent`); the orchestrator never runs more than that against it."""

from __future__ import annotations

import asyncio

from prime_rl.orchestrator.sources.base import TaskSource


class CapacityGate:
    """Per-source concurrency limits: `async with gate(source)` admits at most `source.capacity` episodes."""

    def __init__(self) -> None:
        self._sems: dict[int, asyncio.Semaphore] = {}

    def __call__(self, source: TaskSource) -> asyncio.Semaphore | _NullCtx:
        if source.capacity is None:
            return _NULL
        key = id(source)
        if key not in self._sems:
            self._sems[key] = asyncio.Semaphore(source.capacity)
        return self._sems[key]


class _NullCtx:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NULL = _NullCtx()
