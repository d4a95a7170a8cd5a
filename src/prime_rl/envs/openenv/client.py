"""The typed OpenEnv client of `env-server openenv` (openenv-core's `EnvClient`: a WebSocket session per client).

    async with TaskEnvClient(base_url="http://127.0.0.1:8200/eval") as env:
        first = await env.reset(task_id="gridsim-2021-03-04-HB_WEST")     # .observation: the task
        step = await env.step(TaskAction(tool_name="submit_schedule", arguments={"schedule": [...]}))
        end = await env.step(TaskAction(type="final", content="done"))   # end.reward: the verify score

`TaskEnvClient(...).sync()` is the blocking form (openenv-core's `SyncEnvClient`). Any OpenEnv client plays these
servers; `GenericEnvClient` with plain dicts (`{"type": "call_tool", "tool_name": ..., "arguments": {...}}`) too.
"""

from __future__ import annotations

from typing import Any

import httpx
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from prime_rl.envs.openenv.models import TaskAction, TaskObservation, TaskState


class TaskEnvClient(EnvClient[TaskAction, TaskObservation, TaskState]):
    """openenv-core's WebSocket client with prime-rl's typed models. `base_url`: a split's URL
    (`http://HOST:PORT/all` or `/eval`)."""

    def _step_payload(self, action: TaskAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TaskObservation]:
        obs = TaskObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                              done=payload.get("done", False))  # fmt: skip
        return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done", False)))

    def _parse_state(self, payload: dict[str, Any]) -> TaskState:
        return TaskState(**payload)


def server_info(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """`GET URL/`: the environment an `env-server openenv` server serves (`env`, `env_args`, `splits`).

    Raises:
        ValueError: the URL answers, but not as an `env-server openenv` server (give its root URL).
        ConnectionError: nothing answers there.
    """
    try:
        r = httpx.get(url.rstrip("/") + "/", timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ConnectionError(f"nothing answers at {url} ({e!r}); start `env-server openenv ENV` there first") from e
    info = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
    if r.status_code != 200 or not isinstance(info, dict) or not isinstance(info.get("splits"), dict):
        raise ValueError(f"{url} is not the root of an `env-server openenv` server (GET / answered {r.status_code}); "
                         "give http://HOST:PORT, without a split's path")  # fmt: skip
    return info


def list_tasks(url: str, split: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """`GET URL/<split>/tasks`: the split's tasks as `{"task_id", "split", "index"}`, in the server's order.

    Raises:
        httpx.HTTPStatusError: no such split.
    """
    r = httpx.get(f"{url.rstrip('/')}/{split}/tasks", timeout=timeout_s)
    r.raise_for_status()
    return r.json()["tasks"]
