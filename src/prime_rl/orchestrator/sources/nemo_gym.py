"""The `nemo-gym` taskset: rows from a JSONL file, played over HTTP against a NeMo Gym resources server.

Wraps `prime_rl.envs.nemo_gym.client.NemoGymClient` (seed / tool / verify / close with the server's cookies,
retrying only what cannot run twice, connect and request timeouts separate) and `prime_rl.envs.nemo_gym.rows`
(rows <-> tasks, rows without `task_id` included; tools back in chat-completions form, the form in-process
environments use, so both render alike). `/verify` gets the rollout's whole trajectory as a Responses-API object
(messages, function calls and their outputs), as NeMo Gym's own agents send it.

A client error (`NemoGymError`) becomes `EnvError`, which masks the rollout. So does a verify answer whose
`reward` is missing, null, not a number or not finite (docs/design.md invariant 7: never trained as 0.0); it is logged
with the task. The server's capacity (`max_concurrent` in `/health`) caps concurrent episodes of this source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from prime_rl.config.orchestrator import NemoGymTasksetConfig
from prime_rl.envs.base import Task, VerifyResult, finite_metrics, reward_problem
from prime_rl.envs.nemo_gym.client import NemoGymClient, NemoGymError, Session
from prime_rl.envs.nemo_gym.responses import trajectory_response
from prime_rl.envs.nemo_gym.rows import read_tasks, tasks_from_rows
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.sources.base import AsyncEpisode, EnvError, TaskSource

log = get_logger("orchestrator.nemo_gym")


class NemoGymEpisode(AsyncEpisode):
    """One seeded session on a resources server."""

    def __init__(self, client: NemoGymClient, row: dict[str, Any], session: Session, task_id: str = ""):
        self.client, self.row, self.session, self.task_id = client, row, session, task_id
        self._closed = False

    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        try:
            return await self.client.call_tool(self.session, name, arguments)
        except NemoGymError as e:
            if e.status in (404, 422):  # unknown tool / malformed arguments: the model's mistake, tell it
                return f"Error: {e}"
            raise EnvError(e.kind, _reason(e)) from e

    async def verify(self, final_response: str | None, trajectory: list[dict[str, Any]] | None = None) -> VerifyResult:
        messages = trajectory if trajectory is not None else [{"role": "assistant", "content": final_response or ""}]
        tools = (self.row.get("responses_create_params") or {}).get("tools")
        try:
            out = await self.client.verify(self.session, self.row, response=trajectory_response(messages, tools=tools))
        except NemoGymError as e:
            raise EnvError(e.kind, _reason(e)) from e
        return verify_result(out, self.task_id)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.client.close(self.session)


def _reason(err: NemoGymError) -> str:
    """The client error's message without its kind (the rollout's `error_kind` carries that)."""
    return str(err).removeprefix(f"{err.kind}: ")


def verify_result(out: dict[str, Any], task_id: str = "") -> VerifyResult:
    """The VerifyResult of a `/verify` answer. Masked when the server says so (`mask_sample`) or when `reward` is
    missing, null, not a number or not finite (`envs.base.reward_problem`); the reason names the field and the task.
    The range (`orchestrator.reward_range`) is checked by the agent loop, as for every source."""
    metrics = finite_metrics(out.get("metrics"))
    if out.get("mask_sample") is True:
        return VerifyResult(0.0, metrics, True, out.get("failure_reason") or out.get("failure_kind") or "mask_sample")
    bad = "no `reward`" if "reward" not in out else reward_problem(out.get("reward"), reward_range=None)
    if bad is not None:
        reason = f"verify answered {bad} for task {task_id!r} (expected a finite number)"
        return VerifyResult(0.0, metrics, True, reason)  # logged with the step's masked rollouts
    return VerifyResult(float(out["reward"]), metrics, False, out.get("failure_reason"))


def as_nemo_row(row: dict[str, Any]) -> dict[str, Any]:
    """A NeMo Gym row from a dataset row: as it is when it has `responses_create_params`; else its `prompt` (a
    string or a list of messages) and `tools` become `responses_create_params`, and the other columns stay in the
    row for the server's verify (e.g. `{"prompt": "2+2?", "answer": "4"}`).

    Raises:
        ValueError: neither `responses_create_params` nor `prompt`.
    """
    if "responses_create_params" in row:
        return row
    if "prompt" not in row:
        raise ValueError(
            f"needs `responses_create_params` or `prompt` (it has {sorted(row)}); map yours with env.taskset.columns"
        )
    out = {k: v for k, v in row.items() if k not in ("prompt", "tools")}
    out["responses_create_params"] = {"input": row["prompt"], "tools": row.get("tools") or []}
    return out


class NemoGymSource(TaskSource):
    """Rows of `taskset.dataset` (train) and `taskset.eval_dataset` (eval; default `eval.jsonl` beside the
    dataset), or of the Hugging Face dataset `taskset.name` (`split`, `eval_split`), against
    `taskset.task.resources_url`."""

    def __init__(self, name: str, cfg: NemoGymTasksetConfig, ratio: float = 1.0, max_connections: int = 256):
        self.name, self.cfg, self.ratio = name, cfg, ratio
        self.capacity: int | None = None
        task = cfg.task
        self.client = NemoGymClient(
            task.resources_url, request_timeout=task.request_timeout_s, connect_timeout=task.connect_timeout_s,
            retry_deadline_s=task.retry_deadline_s, token=task.token, max_connections=max_connections,
        )
        self._tasks: dict[str, list[Task]] = {}
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}

    def _path(self, split: str) -> Path:
        if split == "train":
            return Path(self.cfg.dataset)
        if split == "eval":
            return Path(self.cfg.eval_dataset) if self.cfg.eval_dataset else Path(self.cfg.dataset).with_name("eval.jsonl")
        raise KeyError(f"unknown split {split!r} (train, eval)")

    def _pairs(self, split: str) -> list[tuple[Task, dict[str, Any]]]:
        from prime_rl.hf_data import load_rows

        src_cfg = self.cfg
        if src_cfg.name is not None:
            if split not in ("train", "eval"):
                raise KeyError(f"unknown split {split!r} (train, eval)")
            which = src_cfg.split if split == "train" else src_cfg.eval_split
            if which is None:
                raise ValueError(f"source {self.name!r}: eval rows from env.taskset.name = {src_cfg.name!r} need "
                                 f"env.taskset.eval_split (e.g. test)")  # fmt: skip
            rows = load_rows(name=src_cfg.name, subset=src_cfg.subset, split=which, columns=src_cfg.columns,
                             field="env.taskset")
            origin = f"env.taskset.name = {src_cfg.name!r} split {which!r}"
            return tasks_from_rows([as_nemo_row(r) for r in rows], split, origin, f"{self.name}-{which}")
        path = self._path(split)
        if not path.is_file():
            raise FileNotFoundError(f"rows file {path} not found (env.taskset.dataset / eval_dataset); `env-server write` makes one")
        if path.suffix == ".jsonl" and not src_cfg.columns:
            return read_tasks(path, split)
        rows = load_rows(path=path, columns=src_cfg.columns, field="env.taskset")
        return tasks_from_rows([as_nemo_row(r) for r in rows], split, str(path), path.stem)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            tasks = []
            for task, row in self._pairs(split):
                self._rows[(split, task.task_id)] = row
                tasks.append(task)
            self._tasks[split] = tasks
        return self._tasks[split]

    async def start(self) -> None:
        """Read the server's capacity (`max_concurrent` in `/health`), if it reports one."""
        try:
            health = await self.client.health()
        except (TimeoutError, aiohttp.ClientError, NemoGymError, OSError, ValueError) as e:
            log.warning("resources server %s: /health failed (%s); capacity unknown", self.cfg.task.resources_url, e)
            return
        cap = health.get("max_concurrent") if isinstance(health, dict) else None
        if isinstance(cap, int) and cap > 0:
            self.capacity = cap

    async def open(self, task: Task) -> AsyncEpisode:
        row = self._rows[(task.split, task.task_id)]
        try:
            session = await self.client.seed(row)
        except NemoGymError as e:
            raise EnvError(f"seed/{e.kind}", _reason(e)) from e
        return NemoGymEpisode(self.client, row, session, task.task_id)

    async def aclose(self) -> None:
        await self.client.aclose()
