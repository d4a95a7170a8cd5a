"""Difficulty-pool curriculum (`[orchestrator.curriculum] sampler = "difficulty_pool"`).

Per task (source name, task id), the pass/fail outcomes of its last `window` unmasked rollouts (a rollout passes when
its environment reward is at least `pass_threshold`). A task with at least `min_rollouts` outcomes that all passed is
*easy* and is drawn with `easy_weight`; all failed, *hard*, drawn with `hard_weight`; any other task with weight 1.
The task stream applies the weight by acceptance: a drawn task is played with probability equal to its weight,
otherwise the stream moves on to the next task (`TaskStream(weight=...)`), so the weights are relative draw rates.
The pool's state is part of the orchestrator checkpoint.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from prime_rl.config.recipes import CurriculumConfig
from prime_rl.orchestrator.types import Rollout


class DifficultyPool:
    """Pass history per task and the sampling weight it gives (see the module docstring)."""

    def __init__(self, cfg: CurriculumConfig):
        self.cfg = cfg
        self.history: dict[tuple[str, str], deque[bool]] = {}

    def observe(self, group: Sequence[Rollout]) -> None:
        """Record the outcomes of a finished group's unmasked rollouts (rewards before any shaping)."""
        for rollout in group:
            if rollout.masked:
                continue
            key = (rollout.source, str(rollout.task.task_id))
            hist = self.history.setdefault(key, deque(maxlen=self.cfg.window))
            hist.append(rollout.reward >= self.cfg.pass_threshold)

    def weight(self, source: str, task_id: str) -> float:
        """The draw weight of a task: easy_weight, hard_weight or 1.0."""
        hist = self.history.get((source, str(task_id)))
        if hist is None or len(hist) < self.cfg.min_rollouts:
            return 1.0
        if all(hist):
            return self.cfg.easy_weight
        if not any(hist):
            return self.cfg.hard_weight
        return 1.0

    def counts(self) -> dict[str, int]:
        """`{"easy": n, "hard": n, "mixed": n}` over the tasks seen (metrics `curriculum/*`)."""
        out = {"easy": 0, "hard": 0, "mixed": 0}
        for (src, tid), hist in self.history.items():
            draw_weight = self.weight(src, tid)
            if len(hist) >= self.cfg.min_rollouts and all(hist):
                out["easy"] += 1
            elif len(hist) >= self.cfg.min_rollouts and not any(hist):
                out["hard"] += 1
            elif draw_weight == 1.0:
                out["mixed"] += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: `[[source, task_id, [0/1 outcomes, oldest first]], ...]` and the window."""
        return {"window": self.cfg.window,
                "tasks": [[s, t, [int(x) for x in h]] for (s, t), h in self.history.items()]}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; a different window keeps each task's newest `window` outcomes."""
        self.history = {
            (s, t): deque((bool(x) for x in h), maxlen=self.cfg.window) for s, t, h in state.get("tasks", [])
        }
