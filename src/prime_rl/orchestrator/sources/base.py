"""The task-source protocol: a named stream of tasks by split plus a factory of async episodes.

Every kind of source (`inprocess`, `nemo_gym`) implements `TaskSource` and `AsyncEpisode`; the agent loop sees only
these. An environment failure (crash, timeout, lost session, HTTP 503) is raised as `EnvError`, which masks the
rollout (docs/design.md invariant 3), never scores it 0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from prime_rl.config.orchestrator import AgentConfig
from prime_rl.envs.base import Task, VerifyResult


class EnvError(RuntimeError):
    """The environment failed (crash, timeout, lost session, HTTP 503): the rollout is masked, never scored 0."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


class AsyncEpisode(ABC):
    """One episode, driven by the agent loop. `close` is idempotent and called for every episode that was opened."""

    @abstractmethod
    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Result text of a tool call. Raises EnvError when the environment (not the model) failed."""

    async def user_turn(self, reply: str) -> str | None:
        """The next user message after an assistant reply without tool calls, or None to end the episode (the
        default). Raises EnvError when the environment failed."""
        return None

    @abstractmethod
    async def verify(self, final_response: str | None, trajectory: list[dict[str, Any]] | None = None) -> VerifyResult:
        """Reward (or masked + reason). `trajectory`: the chat messages the episode added after the task's prompt
        (assistant turns with `tool_calls` carrying `id`, tool results with `tool_call_id`), for environments that
        score the whole trajectory. Raises EnvError when the environment failed."""

    @abstractmethod
    async def close(self) -> None:
        """End the episode and free its resources (idempotent)."""


class TaskSource(ABC):
    """A named stream of tasks plus episode factory."""

    name: str
    ratio: float = 1.0
    capacity: int | None = None
    max_turns: int = AgentConfig.model_fields["max_turns"].default  # this source's `env.agent.max_turns`

    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """All tasks of `split` in a fixed order."""

    @abstractmethod
    async def open(self, task: Task) -> AsyncEpisode:
        """Start an episode of `task`. Raises EnvError when the environment cannot start one."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect / probe (e.g. read the server's capacity)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""
