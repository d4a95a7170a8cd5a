"""Task sources: where a rollout's task and episode come from (an in-process environment or a NeMo Gym server).

A source gives tasks by split and opens async episodes. Both kinds look the same to the agent loop. A source may
cap how many of its episodes run at once (`capacity`, e.g. a resources server's `--max-concurrent`); the
orchestrator never runs more than that against it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any

from prime_rl.config.orchestrator import EnvConfig, SourceConfig
from prime_rl.envs.base import Environment, Episode, Task, VerifyResult


class EnvError(RuntimeError):
    """The environment failed (crash, timeout, lost session, HTTP 503): the rollout is masked, never scored 0."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class AsyncEpisode(ABC):
    """One episode, driven by the agent loop. `close` is idempotent and called for every episode that was opened."""

    @abstractmethod
    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Result text of a tool call. Raises EnvError when the environment (not the model) failed."""

    @abstractmethod
    async def verify(self, final_response: str | None) -> VerifyResult:
        """Reward (or masked + reason). Raises EnvError when the environment failed."""

    @abstractmethod
    async def close(self) -> None:
        """End the episode and free its resources (idempotent)."""


class TaskSource(ABC):
    """A named stream of tasks plus episode factory."""

    name: str
    ratio: float = 1.0
    capacity: int | None = None
    max_turns: int | None = None  # this source's `env.agent.max_turns`; None: the caller's AgentLimits decide

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

    async def verify(self, final_response: str | None) -> VerifyResult:
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


def build_source(cfg: SourceConfig) -> TaskSource:
    """The source a `[[...source]]` entry names: a built-in environment or a NeMo Gym taskset."""
    env: EnvConfig = cfg.env
    source: TaskSource
    if env.id is not None:
        from prime_rl.envs.base import load_env

        source = InProcessSource(cfg.name, load_env(env.id, **env.args), ratio=cfg.ratio)
    else:
        from prime_rl.orchestrator.nemo_gym_source import NemoGymSource

        source = NemoGymSource(cfg.name, env.taskset, ratio=cfg.ratio)
    source.max_turns = env.agent.max_turns
    return source


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
