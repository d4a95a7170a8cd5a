"""The environment protocol shared by the orchestrator (in-process) and the NeMo Gym resources server (HTTP).

An environment owns its reward: the orchestrator only sees tasks, tool results and `VerifyResult`s.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    """One task: chat `messages` (OpenAI format) and `tools` (OpenAI function schemas) to start an episode."""

    task_id: str
    split: str
    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class VerifyResult:
    """The end of an episode. `masked` = the episode could not be measured (never train on it as 0)."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    masked: bool = False
    reason: str | None = None


class Episode(ABC):
    """One run of one task. Not thread-safe; one episode per rollout."""

    task: Task

    @abstractmethod
    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Run tool `name` with JSON `arguments` (a dict, or a JSON string); return the result text.

        Bad arguments or an unknown tool return an error text for the model; this never raises for model mistakes.
        """

    @abstractmethod
    def verify(self, final_response: str | None = None) -> VerifyResult:
        """Score the episode; `final_response` is the model's last assistant text (single-turn environments)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; idempotent."""


class Environment(ABC):
    """A named set of tasks by split (`train`, `eval`) and a factory of episodes."""

    name: str

    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """All tasks of `split`, in a fixed order. Raises KeyError for an unknown split."""

    @abstractmethod
    def episode(self, task: Task) -> Episode:
        """Start an episode of `task`."""

    def sft_examples(self, split: str = "train") -> list[dict[str, Any]]:
        """Demonstrations: chat conversations (`messages`, `tools`) that solve the tasks of `split`."""
        raise NotImplementedError(f"environment {self.name!r} has no demonstrations")


_REGISTRY: dict[str, str | Callable[..., Environment]] = {
    "gridsim": "prime_rl.envs.gridsim.env:GridSimEnv",
    "reverse-text": "prime_rl.envs.reverse_text.env:ReverseTextEnv",
}


def register_env(name: str, factory: str | Callable[..., Environment]) -> None:
    """Register a built-in environment by name: a callable or an import path `module:attr`."""
    _REGISTRY[name] = factory


def list_envs() -> list[str]:
    return sorted(_REGISTRY)


def load_env(name: str, **kwargs: Any) -> Environment:
    """Build a registered environment (or one given as `module:attr`) with its keyword arguments.

    Raises:
        KeyError: unknown name (lists the known ones).
    """
    factory = _REGISTRY.get(name, name if ":" in name else None)
    if factory is None:
        raise KeyError(f"unknown environment {name!r}; built in: {', '.join(list_envs())} (or give module:attr)")
    if isinstance(factory, str):
        mod, attr = factory.split(":")
        factory = getattr(importlib.import_module(mod), attr)
    return factory(**kwargs)
