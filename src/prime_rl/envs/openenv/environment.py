"""One split of a prime-rl environment as an OpenEnv `Environment`: an episode per task, played by tool calls.

openenv-core's server makes one `TaskEnvironment` per WebSocket session (and a throwaway one per stateless HTTP
request); every session of a split shares that split's `SplitTasks` (read-only tasks, a lock-guarded "next task"
cursor). The prime-rl `Episode` does the work: `call_tool` answers a tool call, `verify` scores the final reply.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment as OpenEnvEnvironment
from openenv.core.env_server.types import EnvironmentMetadata

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult, finite_metrics, reward_problem
from prime_rl.envs.openenv.models import TaskAction, TaskObservation, TaskState

NO_EPISODE = (
    "no episode: reset first. OpenEnv's HTTP /step is stateless (a new environment per request); play an episode "
    "over the WebSocket session (/ws, what openenv-core's EnvClient uses)"
)


class ResetError(ValueError):
    """A reset that names no task of the split (or bad arguments); `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class SplitTasks:
    """The tasks one OpenEnv environment serves: split `name` of `env` (or `all`: every split's tasks, each keeping
    its own `split` and `index`), in a fixed order.

    Raises:
        ValueError: two tasks share a `task_id` (reset by id would be ambiguous).
    """

    def __init__(self, env: Environment, name: str, tasks: list[Task]):
        self.env, self.name, self.tasks = env, name, tasks
        self.by_id: dict[str, int] = {}
        for i, task in enumerate(tasks):
            if task.task_id in self.by_id:
                raise ValueError(f"split {name!r}: task_id {task.task_id!r} appears twice; ids must be unique")
            self.by_id[task.task_id] = i
        self._next = 0
        self._lock = threading.Lock()

    def pick(self, task_id: str | None = None, index: int | None = None, seed: int | None = None) -> Task:
        """The task named by `task_id`, else the one at `index`, else task `seed mod N` (OpenEnv's `seed`: the same
        seed, the same task), else the next one in order (a cursor shared by the split's sessions, wrapping around).

        Raises:
            ResetError: both `task_id` and `index`; an unknown id (404); an index out of range (404).
        """
        num_tasks = len(self.tasks)
        if task_id is not None and index is not None:
            raise ResetError("reset takes task_id or index, not both")
        if task_id is not None:
            if task_id not in self.by_id:
                raise ResetError(f"no task {task_id!r} in split {self.name!r} ({num_tasks} tasks; "
                                 f"GET /{self.name}/tasks lists them)", status=404)  # fmt: skip
            return self.tasks[self.by_id[task_id]]
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_tasks:
                raise ResetError(f"index {index!r} is not a task of split {self.name!r} (0..{num_tasks - 1})",
                                 status=404)  # fmt: skip
            return self.tasks[index]
        if seed is not None:
            return self.tasks[seed % num_tasks]
        with self._lock:
            picked, self._next = self._next, (self._next + 1) % num_tasks
        return self.tasks[picked]


class TaskEnvironment(OpenEnvEnvironment[TaskAction, TaskObservation, TaskState]):
    """An OpenEnv environment over one split's tasks: `reset` starts an episode of a task, `step` plays it.

    Sessions are independent (each has its own episode; the shared `SplitTasks` is read-only but for its cursor,
    which is locked), so openenv-core may run up to `max_concurrent_envs` of them at once.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, split: SplitTasks):
        super().__init__()
        self.split = split
        self.episode: Episode | None = None
        self.end: TaskObservation | None = None  # the observation that ended the episode
        self._state = TaskState(split=split.name)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              index: int | None = None, **kwargs: Any) -> TaskObservation:  # fmt: skip
        """Start an episode of the task `task_id`, or at `index`, or `seed mod N`, or the next one (`SplitTasks.pick`).

        Raises:
            ResetError: an unknown argument, or no such task.
        """
        if kwargs:
            raise ResetError(f"unknown reset argument(s) {sorted(kwargs)}; reset takes task_id, index, seed, episode_id")
        task = self.split.pick(task_id=task_id, index=index, seed=seed)
        self.close()
        self.episode, self.end = self.split.env.episode(task), None
        self._state = TaskState(episode_id=episode_id or uuid.uuid4().hex, task_id=task.task_id, split=self.split.name)
        return TaskObservation(task_id=task.task_id, split=task.split, index=task.index, messages=task.messages,
                               tools=task.tools, info=task.info)  # fmt: skip

    def step(self, action: TaskAction, timeout_s: float | None = None, **kwargs: Any) -> TaskObservation:
        """Run one action: a tool call answers the tool's text; the final reply ends the episode with its verify
        reward. A tool or verifier that raises ends the episode masked (reward None), never a server error.
        `timeout_s` (OpenEnv's HTTP argument) is not applied: the built-in tools answer at once."""
        if self.episode is None:
            return TaskObservation(error=NO_EPISODE, done=True)
        if self.end is not None:
            return self.end.model_copy(update={"error": "the episode has ended; reset to start another"})
        task = self.episode.task
        self._state.step_count += 1
        if action.type == "call_tool":
            try:
                text = self.episode.call_tool(action.tool_name or "", action.arguments)
            except Exception as e:  # noqa: BLE001 - a crashing tool masks the episode instead of failing the session
                return self._finish(VerifyResult(0.0, masked=True, reason=f"tool {action.tool_name!r} raised {e!r}"),
                                    tool_name=action.tool_name)  # fmt: skip
            return TaskObservation(task_id=task.task_id, split=task.split, index=task.index,
                                   tool_name=action.tool_name, result=text)  # fmt: skip
        try:
            result = self.episode.verify(action.content)
        except Exception as e:  # noqa: BLE001
            result = VerifyResult(0.0, masked=True, reason=f"verify raised {e!r}")
        return self._finish(result)

    def _finish(self, result: VerifyResult, tool_name: str | None = None) -> TaskObservation:
        assert self.episode is not None
        task = self.episode.task
        masked, reason = result.masked, result.reason
        bad = None if masked else reward_problem(result.reward)  # the one reward check, default range
        if bad is not None:
            masked, reason = True, f"the verifier returned {bad}"
        reward = None if masked else float(result.reward)
        metrics = finite_metrics(result.metrics)
        self.end = TaskObservation(task_id=task.task_id, split=task.split, index=task.index, tool_name=tool_name,
                                   metrics=metrics, masked=masked, reason=reason, done=True, reward=reward)  # fmt: skip
        self._state.done, self._state.reward = True, reward
        return self.end

    @property
    def state(self) -> TaskState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        env = self.split.env
        return EnvironmentMetadata(
            name=f"{env.name}/{self.split.name}", version="1",
            description=f"prime-rl's {env.name} environment, split {self.split.name!r} ({len(self.split.tasks)} tasks): "
            "reset picks a task (task_id, index, seed or the next), step takes a tool call or the final reply, the "
            "final reply's reward is the task's verify score",
        )  # fmt: skip

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None
