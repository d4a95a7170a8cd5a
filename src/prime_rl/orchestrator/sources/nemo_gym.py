"""The `nemo-gym` taskset: rows from a JSONL file, played over HTTP against a NeMo Gym resources server.

Wraps `prime_rl.envs.nemo_gym.client.NemoGymClient` (seed / tool / verify / close with the session cookie, 503 and
transport retries with backoff up to `retry_deadline_s`, connect and request timeouts separate) and
`prime_rl.envs.nemo_gym.rows` (rows <-> tasks; tools back in chat-completions form, the form in-process
environments use, so both render alike). A client error (`NemoGymError`) becomes `EnvError`, which masks the
rollout. The server's capacity (`max_concurrent` in `/health`) caps concurrent episodes of this source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from prime_rl.config.orchestrator import TasksetConfig
from prime_rl.envs.base import Task, VerifyResult
from prime_rl.envs.nemo_gym.client import NemoGymClient, NemoGymError, Session
from prime_rl.envs.nemo_gym.rows import read_rows, row_to_task
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.sources.base import AsyncEpisode, EnvError, TaskSource

log = get_logger("orchestrator.nemo_gym")


class NemoGymEpisode(AsyncEpisode):
    """One seeded session on a resources server."""

    def __init__(self, client: NemoGymClient, row: dict[str, Any], session: Session):
        self.client, self.row, self.session = client, row, session
        self._closed = False

    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        try:
            return await self.client.call_tool(self.session, name, arguments)
        except NemoGymError as e:
            if e.status in (404, 422):  # unknown tool / malformed arguments: the model's mistake, tell it
                return f"Error: {e}"
            raise EnvError(e.kind, str(e)) from e

    async def verify(self, final_response: str | None) -> VerifyResult:
        try:
            out = await self.client.verify(self.session, self.row, response=final_response or "")
        except NemoGymError as e:
            raise EnvError(e.kind, str(e)) from e
        metrics = {k: float(v) for k, v in (out.get("metrics") or {}).items() if isinstance(v, int | float)}
        reason = out.get("failure_reason") or out.get("failure_kind")
        return VerifyResult(float(out.get("reward") or 0.0), metrics, bool(out.get("mask_sample", False)), reason)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.client.close(self.session)


class NemoGymSource(TaskSource):
    """Rows of `taskset.dataset` (train) and `taskset.eval_dataset` (eval; default `eval.jsonl` beside the
    dataset) against `taskset.task.resources_url`."""

    def __init__(self, name: str, cfg: TasksetConfig, ratio: float = 1.0, max_connections: int = 256):
        self.name, self.cfg, self.ratio = name, cfg, ratio
        self.capacity: int | None = None
        t = cfg.task
        self.client = NemoGymClient(
            t.resources_url, request_timeout=t.request_timeout, connect_timeout=t.connect_timeout,
            retry_deadline_s=t.retry_deadline_s, token=t.token, max_connections=max_connections,
        )
        self._tasks: dict[str, list[Task]] = {}
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}

    def _path(self, split: str) -> Path:
        if split == "train":
            return Path(self.cfg.dataset)
        if split == "eval":
            return Path(self.cfg.eval_dataset) if self.cfg.eval_dataset else Path(self.cfg.dataset).with_name("eval.jsonl")
        raise KeyError(f"unknown split {split!r} (train, eval)")

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            path = self._path(split)
            if not path.is_file():
                raise FileNotFoundError(f"rows file {path} not found (env.taskset.dataset / eval_dataset); `env-server write` makes one")
            tasks = []
            for row in read_rows(path):
                task = row_to_task(row)
                task.split = split
                self._rows[(split, task.task_id)] = row
                tasks.append(task)
            self._tasks[split] = tasks
        return self._tasks[split]

    async def start(self) -> None:
        """Read the server's capacity (`max_concurrent` in `/health`), if it reports one."""
        try:
            h = await self.client.health()
        except (httpx.HTTPError, OSError, ValueError) as e:
            log.warning("resources server %s: /health failed (%s); capacity unknown", self.cfg.task.resources_url, e)
            return
        cap = h.get("max_concurrent") if isinstance(h, dict) else None
        if isinstance(cap, int) and cap > 0:
            self.capacity = cap

    async def open(self, task: Task) -> AsyncEpisode:
        row = self._rows[(task.split, task.task_id)]
        try:
            session = await self.client.seed(row)
        except NemoGymError as e:
            raise EnvError(f"seed/{e.kind}", str(e)) from e
        return NemoGymEpisode(self.client, row, session)

    async def aclose(self) -> None:
        await self.client.aclose()
