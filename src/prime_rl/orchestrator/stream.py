"""The training task stream: which task each new group plays, deterministic and checkpointable.

Each source's train split is walked in a seeded random order, reshuffled every epoch; the source of each group is
drawn with probability proportional to its `ratio`. With a `weight(source index, task) -> (0, 1]` (the curriculum,
`prime_rl.orchestrator.curriculum`), a drawn task is played with that probability (one draw of the picker's RNG) and
otherwise skipped for the next one; after 1000 skips in a row the next task is played. `state_dict()` captures everything (positions, epochs, the
picker's RNG, tasks put back for replay), so a resumed run draws the same tasks in the same order.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

from prime_rl.envs.base import Task
from prime_rl.orchestrator.sources import TaskSource


class TaskStream:
    """Endless deterministic stream of `(source index, task)` for training groups."""

    MAX_SKIPS = 1000

    def __init__(self, sources: list[TaskSource], seed: int, split: str = "train",
                 weight: Callable[[int, Task], float] | None = None):
        if not sources:
            raise ValueError("orchestrator.train.source is empty: name at least one environment")
        self.sources = sources
        self.seed = seed
        self.split = split
        self.weight = weight
        self._tasks = [s.tasks(split) for s in sources]
        for source, tasks in zip(sources, self._tasks, strict=True):
            if not tasks:
                raise ValueError(f"source {source.name!r} has no {split!r} tasks")
        self._pick = random.Random(seed)
        self._epoch = [0] * len(sources)
        self._pos = [0] * len(sources)
        self._order = [self._shuffled(i) for i in range(len(sources))]
        self._replay: deque[tuple[int, int]] = deque()  # (source idx, task position in the split) drawn before

    def _shuffled(self, source_idx: int) -> list[int]:
        order = list(range(len(self._tasks[source_idx])))
        random.Random(self.seed * 1_000_003 + source_idx * 7919 + self._epoch[source_idx]).shuffle(order)
        return order

    def next(self) -> tuple[int, int, Task]:
        """The next `(source index, task position, task)`."""
        if self._replay:
            source_idx, task_pos = self._replay.popleft()
            return source_idx, task_pos, self._tasks[source_idx][task_pos]
        for _ in range(self.MAX_SKIPS):
            source_idx, task_pos = self._draw()
            weight = 1.0 if self.weight is None else self.weight(source_idx, self._tasks[source_idx][task_pos])
            if weight >= 1.0 or self._pick.random() < weight:
                return source_idx, task_pos, self._tasks[source_idx][task_pos]
        source_idx, task_pos = self._draw()
        return source_idx, task_pos, self._tasks[source_idx][task_pos]

    def _draw(self) -> tuple[int, int]:
        if len(self.sources) == 1:
            source_idx = 0
        else:
            source_idx = self._pick.choices(range(len(self.sources)), weights=[s.ratio for s in self.sources])[0]
        if self._pos[source_idx] >= len(self._order[source_idx]):
            self._epoch[source_idx] += 1
            self._pos[source_idx] = 0
            self._order[source_idx] = self._shuffled(source_idx)
        task_pos = self._order[source_idx][self._pos[source_idx]]
        self._pos[source_idx] += 1
        return source_idx, task_pos

    def state_dict(self, outstanding: list[tuple[int, int]] = ()) -> dict[str, Any]:
        """JSON-able state; `outstanding` = tasks drawn but not yet trained on (replayed first after a resume)."""
        st = self._pick.getstate()
        return {
            "seed": self.seed,
            "sources": [s.name for s in self.sources],
            "epoch": list(self._epoch),
            "pos": list(self._pos),
            "pick_rng": [st[0], list(st[1]), st[2]],
            "replay": [list(x) for x in list(outstanding) + list(self._replay)],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`. Raises ValueError when the sources differ from the checkpoint's."""
        names = [s.name for s in self.sources]
        if state["sources"] != names:
            raise ValueError(f"checkpoint has sources {state['sources']}, config has {names}: resume with the same sources")
        self._epoch = list(state["epoch"])
        self._pos = list(state["pos"])
        self._order = [self._shuffled(i) for i in range(len(self.sources))]
        version, internal, gauss_next = state["pick_rng"]
        self._pick.setstate((version, tuple(internal), gauss_next))
        self._replay = deque((int(i), int(j)) for i, j in state["replay"])
