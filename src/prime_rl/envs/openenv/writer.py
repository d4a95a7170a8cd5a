"""`env-server write URL OUT`: the NeMo Gym folder and rows of the environment an `env-server openenv` server serves.

The tasks travel through the OpenEnv client: the server's task list (`GET /<split>/tasks`, ours) names them, and a
`reset` of each over OpenEnv's WebSocket session answers its messages, tools and info. Train rows are the `all`
split's train tasks, eval rows the `eval` split's; both are then written by `prime_rl.envs.nemo_gym.rows.write_server`,
so the folder is the one `env-server write ENV OUT` writes for the same data.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prime_rl.envs.base import Environment, Episode, Task


class ServedTasks(Environment):
    """The tasks read from an OpenEnv server, by split, as an `Environment` that only lists them (its episodes are
    played on the server)."""

    def __init__(self, name: str, tasks: dict[str, list[Task]]):
        self.name, self._tasks = name, tasks

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            raise KeyError(f"unknown split {split!r}; read from the server: {', '.join(self._tasks)}")
        return self._tasks[split]

    def episode(self, task: Task) -> Episode:
        raise NotImplementedError("tasks read from an OpenEnv server are played there (`env-server serve` the rows)")


async def _read(url: str, split: str, ids: list[str], concurrency: int, timeout_s: float) -> list[Task]:
    from prime_rl.envs.openenv.client import TaskEnvClient

    out: list[Task | None] = [None] * len(ids)
    base = f"{url.rstrip('/')}/{split}"

    async def worker(offset: int) -> None:
        async with TaskEnvClient(base_url=base, message_timeout_s=timeout_s) as client:
            for i in range(offset, len(ids), concurrency):
                obs = (await client.reset(task_id=ids[i])).observation
                if obs.task_id != ids[i]:
                    raise ValueError(f"{base}: reset(task_id={ids[i]!r}) answered task {obs.task_id!r}")
                out[i] = Task(task_id=obs.task_id, split=obs.split, index=obs.index, messages=obs.messages,
                              tools=obs.tools, info=obs.info)  # fmt: skip

    await asyncio.gather(*(worker(k) for k in range(min(concurrency, len(ids)))))
    return [t for t in out if t is not None]


def read_served_tasks(url: str, concurrency: int = 4, timeout_s: float = 60.0) -> tuple[dict[str, Any], ServedTasks]:
    """The server's description (`GET /`) and its tasks: `train` = the `all` split's train tasks, `eval` = the `eval`
    split's, each in the server's order, through `concurrency` OpenEnv sessions per split (at most the server's
    `max_concurrent_envs`).

    Raises:
        ValueError: not an `env-server openenv` server; a task in both splits. ConnectionError: nothing answers.
        RuntimeError: the OpenEnv server refused a reset (openenv-core's client raises it with the server's message).
    """
    from prime_rl.envs.openenv.client import list_tasks, server_info

    async def read_all() -> tuple[dict[str, Any], list[Task], list[Task]]:
        info = await server_info(url)
        num_workers = max(1, min(concurrency, int(info.get("max_concurrent_envs", concurrency))))
        train_ids = [t["task_id"] for t in await list_tasks(url, "all") if t["split"] == "train"]
        eval_ids = [t["task_id"] for t in await list_tasks(url, "eval")]
        both = set(train_ids) & set(eval_ids)
        if both:
            raise ValueError(f"{url}: {len(both)} task(s) are in both train and eval (e.g. {sorted(both)[0]!r})")
        train, ev = await asyncio.gather(_read(url, "all", train_ids, num_workers, timeout_s),
                                         _read(url, "eval", eval_ids, num_workers, timeout_s))  # fmt: skip
        return info, train, ev

    info, train, ev = asyncio.run(read_all())
    return info, ServedTasks(str(info["env"]), {"train": train, "eval": ev})


def write_from_openenv(url: str, out: str | Path) -> Path:
    """Write `out/resources_servers/<env>_v1/` (NeMo Gym config, rows, server.json naming the server's environment
    and arguments) from the tasks an `env-server openenv` server at `url` serves. Returns the server directory.

    Raises:
        as `read_served_tasks`.
    """
    from prime_rl.envs.nemo_gym.rows import write_server

    info, tasks = read_served_tasks(url)
    return write_server(str(info["env"]), out, dict(info.get("env_args") or {}), env=tasks)
