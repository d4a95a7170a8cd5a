"""In-process sources: a built-in `prime_rl.envs` environment (`env.id`) run inside the orchestrator. Its
exceptions become `EnvError` (the rollout is masked)."""

from __future__ import annotations

from typing import Any

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult
from prime_rl.orchestrator.sources.base import AsyncEpisode, EnvError, TaskSource


class InProcessEpisode(AsyncEpisode):
    """An in-process `prime_rl.envs` episode; exceptions from the environment become EnvError (masked)."""

    def __init__(self, episode: Episode):
        self.episode = episode
        self._closed = False

    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        try:
            return self.episode.call_tool(name, arguments)
        except Exception as e:
            raise EnvError("tool_crash", f"{type(e).__name__}: {e}") from e

    async def user_turn(self, reply: str) -> str | None:
        try:
            return self.episode.user_turn(reply)
        except Exception as e:
            raise EnvError("user_turn_crash", f"{type(e).__name__}: {e}") from e

    async def verify(self, final_response: str | None, trajectory: list[dict[str, Any]] | None = None) -> VerifyResult:
        try:
            return self.episode.verify(final_response)
        except Exception as e:
            raise EnvError("verify_crash", f"{type(e).__name__}: {e}") from e

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.episode.close()


class InProcessSource(TaskSource):
    """A built-in environment (`env.id`) run inside the orchestrator."""

    def __init__(self, name: str, env: Environment, ratio: float = 1.0):
        self.name = name
        self.env = env
        self.ratio = ratio
        self._tasks: dict[str, list[Task]] = {}

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = self.env.tasks(split)
        return self._tasks[split]

    async def open(self, task: Task) -> AsyncEpisode:
        try:
            return InProcessEpisode(self.env.episode(task))
        except Exception as e:
            raise EnvError("seed_crash", f"{type(e).__name__}: {e}") from e
