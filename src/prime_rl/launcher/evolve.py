"""Changing a validated config without touching it: `evolve` returns a new model with some (nested) fields
replaced, sharing every untouched sub-model with the original (pydantic `model_copy(update=...)` along the path),
and `map_sources` replaces the orchestrator's train and eval sources. The launch plan (`plan.py`) builds the
configs of a run with these only, so the config the user gave stays as it was parsed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def evolve(model: M, changes: dict[str, Any]) -> M:
    """A copy of `model` with each dotted field of `changes` set (`{"orchestrator.ckpt.keep_last": 4}`); `model`
    and its sub-models are not changed. Values are not validated (they come from the launcher, not the user).

    Raises:
        AttributeError: a path names no field (a launcher bug)."""
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in changes.items():
        head, dot, rest = path.partition(".")
        if head not in type(model).model_fields:
            raise AttributeError(f"{type(model).__name__} has no field {head!r} (evolve path {path!r})")
        if dot:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for head, sub in nested.items():
        direct[head] = evolve(getattr(model, head), sub)
    return model.model_copy(update=direct) if direct else model


def map_sources(cfg: Any, fn: Callable[[str, Any], Any]) -> Any:
    """A copy of the RL config `cfg` whose train and eval sources are `fn(dotted path, source)`; `fn` returns the
    source itself (unchanged) or a new one."""
    orch = cfg.orchestrator
    train = [fn(f"orchestrator.train.source[{i}]", s) for i, s in enumerate(orch.train.source)]
    changes: dict[str, Any] = {"orchestrator.train.source": train}
    if orch.eval.source is not None:
        changes["orchestrator.eval.source"] = [fn(f"orchestrator.eval.source[{i}]", s)
                                               for i, s in enumerate(orch.eval.source)]  # fmt: skip
    return evolve(cfg, changes)


def with_task(src: Any, **task: Any) -> Any:
    """A copy of the nemo-gym source `src` with `env.taskset.task` fields replaced (resources_url, token)."""
    ts = src.env.taskset
    return evolve(src, {"env.taskset.task": ts.task.model_copy(update=task)})
