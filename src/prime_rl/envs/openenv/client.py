"""The typed OpenEnv client of `env-server openenv` (openenv-core's `EnvClient`: a WebSocket session per client).

    async with TaskEnvClient(base_url="http://127.0.0.1:8200/eval") as env:
        first = await env.reset(task_id="gridsim-2021-03-04-HB_WEST")     # .observation: the task
        step = await env.step(TaskAction(tool_name="submit_schedule", arguments={"schedule": [...]}))
        end = await env.step(TaskAction(type="final", content="done"))   # end.reward: the verify score

`TaskEnvClient(...).sync()` is the blocking form (openenv-core's `SyncEnvClient`). Any OpenEnv client plays these
servers; `GenericEnvClient` with plain dicts (`{"type": "call_tool", "tool_name": ..., "arguments": {...}}`) too.
The plain HTTP routes of the server (`server_info`, `list_tasks`) go through prime-rl's HTTP layer (`prime_rl.http`).
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from prime_rl.envs.openenv.models import TaskAction, TaskObservation, TaskState
from prime_rl.http import TRANSPORT_ERRORS, get_json


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


async def server_info(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """`GET URL/`: the environment an `env-server openenv` server serves (`env`, `env_args`, `splits`), through
    prime-rl's HTTP layer (`prime_rl.http`).

    Raises:
        ValueError: the URL answers, but not as an `env-server openenv` server (give its root URL).
        ConnectionError: nothing answers there.
    """
    try:
        resp, info = await get_json(url.rstrip("/") + "/", timeout_s)
    except TRANSPORT_ERRORS as e:
        raise ConnectionError(f"nothing answers at {url} ({e!r}); start `env-server openenv ENV` there first") from e
    if resp.status != 200 or not isinstance(info, dict) or not isinstance(info.get("splits"), dict):
        raise ValueError(f"{url} is not the root of an `env-server openenv` server (GET / answered {resp.status}); "
                         "give http://HOST:PORT, without a split's path")  # fmt: skip
    return info


async def list_tasks(url: str, split: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """`GET URL/<split>/tasks`: the split's tasks as `{"task_id", "split", "index"}`, in the server's order.

    Raises:
        ValueError: no such split (the server's answer in the message).
        ConnectionError: nothing answers there.
    """
    where = f"{url.rstrip('/')}/{split}/tasks"
    try:
        resp, body = await get_json(where, timeout_s)
    except TRANSPORT_ERRORS as e:
        raise ConnectionError(f"nothing answers at {where} ({e!r})") from e
    if resp.status != 200 or not isinstance(body, dict) or not isinstance(body.get("tasks"), list):
        raise ValueError(f"GET {where} answered {resp.status}: {resp.text[:300]}")
    return body["tasks"]
