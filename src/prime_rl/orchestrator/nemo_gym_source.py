"""The `nemo-gym` taskset: rows from a JSONL file, played over HTTP against a NeMo Gym resources server.

Protocol (DESIGN.md, Environments): `POST /seed_session` (body: the row) answers a session cookie; `POST /<tool>`
(body: JSON arguments) answers the result text; `POST /verify` (body: row + the model's final response) answers
`reward`, `mask_sample`, `failure_kind`, `failure_reason`; `POST /close_session` ends the episode; `GET /health`
reports the server's capacity.

Failure handling: connect and read timeouts are separate (`connect_timeout`, `request_timeout`); transport errors
and `503` answers without a masked verdict (e.g. capacity, with `Retry-After`) are retried with exponential backoff
up to `retry_deadline_s`; a masked verdict (`mask_sample`, or `503` carrying `failure_kind`) or an exhausted
deadline raises EnvError, which masks the rollout. `close_session` is sent for every seeded session.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx

from prime_rl.config.orchestrator import ResourcesTaskConfig, TasksetConfig
from prime_rl.envs.base import Task, VerifyResult
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.sources import AsyncEpisode, EnvError, TaskSource

log = get_logger("orchestrator.nemo_gym")


def normalize_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Responses-API function tools (`{"type": "function", "name", "parameters"}`) -> chat-completions form
    (`{"type": "function", "function": {...}}`), the form in-process environments use, so both render alike."""
    if "function" in tool or "name" not in tool:
        return tool
    fn = {k: v for k, v in tool.items() if k not in ("type", "strict")}
    return {"type": "function", "function": fn}


def row_to_task(row: dict[str, Any], line: int, path: Path) -> Task:
    """A dataset row as a Task (raises ValueError naming the file and line when fields are missing)."""
    try:
        params = row["responses_create_params"]
        messages = params["input"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}:{line}: row lacks responses_create_params.input ({e})") from e
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    tools = [normalize_tool(t) for t in params.get("tools") or []]
    return Task(
        task_id=str(row.get("task_id", f"{path.stem}-{line}")),
        split=str(row.get("split", "")),
        index=int(row.get("index", line)),
        messages=[dict(m) for m in messages],
        tools=tools,
        info={"row": row},
    )


def read_rows(path: Path) -> list[Task]:
    """Tasks of a rows JSONL file. Raises FileNotFoundError / ValueError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"rows file {path} not found (env.taskset.dataset / eval_dataset); `env-server write` makes one")
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not JSON ({e})") from e
            out.append(row_to_task(row, i, path))
    return out


class ResourcesClient:
    """Async HTTP client of one resources server, with retries (see the module docstring)."""

    def __init__(self, cfg: ResourcesTaskConfig):
        self.cfg = cfg
        self.base = cfg.resources_url.rstrip("/")
        headers = {"Authorization": f"Bearer {cfg.token}"} if cfg.token else {}
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.request_timeout, connect=cfg.connect_timeout),
            headers=headers,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )

    async def post(self, route: str, body: Any, cookie: str | None = None, deadline_s: float | None = None) -> httpx.Response:
        """POST with retries on transport errors and retryable 503s until the deadline; returns the final answer.

        Raises:
            EnvError: `transport` (deadline passed on transport errors) or `unavailable` (503 past the deadline).
        """
        deadline = time.monotonic() + (self.cfg.retry_deadline_s if deadline_s is None else deadline_s)
        headers = {"Cookie": cookie} if cookie else None
        delay = 0.05
        while True:
            try:
                resp = await self.http.post(self.base + route, json=body, headers=headers)
            except httpx.TransportError as e:
                err = EnvError("transport", f"POST {route} to {self.base}: {type(e).__name__}: {e}")
                resp = None
            if resp is not None:
                if resp.status_code != 503 or _masked_503(resp):
                    return resp
                err = EnvError("unavailable", f"POST {route}: 503 {resp.text[:200]}")
                ra = resp.headers.get("retry-after")
                if ra:
                    try:
                        delay = max(delay, float(ra))
                    except ValueError:
                        pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise err
            await asyncio.sleep(min(left, delay * (0.5 + random.random())))
            delay = min(delay * 2, 5.0)

    async def health(self) -> dict[str, Any]:
        resp = await self.http.get(self.base + "/health", timeout=self.cfg.connect_timeout)
        resp.raise_for_status()
        try:
            return resp.json()
        except ValueError:
            return {}

    async def aclose(self) -> None:
        await self.http.aclose()


def _masked_503(resp: httpx.Response) -> bool:
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and bool(body.get("failure_kind") or body.get("mask_sample"))


def _body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text


class NemoGymEpisode(AsyncEpisode):
    """One seeded session on a resources server."""

    def __init__(self, client: ResourcesClient, row: dict[str, Any], cookie: str):
        self.client, self.row, self.cookie = client, row, cookie
        self._closed = False

    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return f"Error: arguments of {name!r} are not valid JSON: {arguments[:200]!r}"
        if not isinstance(arguments, dict):
            return f"Error: arguments of {name!r} must be a JSON object"
        if not name or "/" in name or name in ("seed_session", "verify", "close_session", "health"):
            return f"Error: unknown tool {name!r}"
        resp = await self.client.post(f"/{name}", arguments, self.cookie)
        body = _body(resp)
        if resp.status_code == 503 or (isinstance(body, dict) and body.get("mask_sample")):
            kind = body.get("failure_kind", "masked") if isinstance(body, dict) else "masked"
            raise EnvError(str(kind), f"tool {name}: {str(body)[:200]}")
        if resp.status_code in (404, 422):  # unknown tool / bad arguments: the model's mistake, tell it
            return f"Error ({resp.status_code}): {resp.text[:300]}"
        if resp.status_code >= 400:
            raise EnvError(f"http_{resp.status_code}", f"tool {name}: {resp.text[:200]}")
        if isinstance(body, str):
            return body
        if isinstance(body, dict):
            for key in ("output", "result", "text", "content"):
                if isinstance(body.get(key), str):
                    return body[key]
        return json.dumps(body)

    async def verify(self, final_response: str | None) -> VerifyResult:
        text = final_response or ""
        body = {
            **self.row,
            "response": {
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
                "output_text": text,
            },
        }
        resp = await self.client.post("/verify", body, self.cookie)
        out = _body(resp)
        if resp.status_code == 503 or not isinstance(out, dict):
            kind = out.get("failure_kind", "unavailable") if isinstance(out, dict) else "bad_verify_answer"
            raise EnvError(str(kind), f"verify: {str(out)[:200]}")
        if resp.status_code >= 400:
            raise EnvError(f"http_{resp.status_code}", f"verify: {resp.text[:200]}")
        masked = bool(out.get("mask_sample", False))
        metrics = {k: float(v) for k, v in (out.get("metrics") or {}).items() if isinstance(v, int | float)}
        reason = out.get("failure_reason") or out.get("failure_kind")
        return VerifyResult(reward=float(out.get("reward", 0.0) or 0.0), metrics=metrics, masked=masked, reason=reason)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.client.post("/close_session", {}, self.cookie, deadline_s=min(10.0, self.client.cfg.retry_deadline_s))
        except EnvError as e:
            log.warning("close_session failed (the server's idle timeout will reap it): %s", e)


class NemoGymSource(TaskSource):
    """Rows of `taskset.dataset` (train) and `taskset.eval_dataset` (eval) against `taskset.task.resources_url`."""

    def __init__(self, name: str, cfg: TasksetConfig, ratio: float = 1.0):
        self.name = name
        self.cfg = cfg
        self.ratio = ratio
        self.capacity: int | None = None
        self.client = ResourcesClient(cfg.task)
        self._tasks: dict[str, list[Task]] = {}

    def _path(self, split: str) -> Path:
        if split == "train":
            return Path(self.cfg.dataset)
        if split == "eval":
            return Path(self.cfg.eval_dataset) if self.cfg.eval_dataset else Path(self.cfg.dataset).with_name("eval.jsonl")
        raise KeyError(f"unknown split {split!r} (train, eval)")

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = read_rows(self._path(split))
        return self._tasks[split]

    async def start(self) -> None:
        """Read the server's capacity from `/health` (`max_concurrent` or `capacity`), if it reports one."""
        try:
            h = await self.client.health()
        except (httpx.HTTPError, OSError) as e:
            log.warning("resources server %s: /health failed (%s); capacity unknown", self.client.base, e)
            return
        for key in ("max_concurrent", "capacity", "max_sessions"):
            if isinstance(h.get(key), int):
                self.capacity = h[key]
                break

    async def open(self, task: Task) -> AsyncEpisode:
        row = task.info["row"]
        resp = await self.client.post("/seed_session", row)
        if resp.status_code >= 400:
            raise EnvError(f"seed_http_{resp.status_code}", resp.text[:200])
        cookie = "; ".join(f"{k}={v}" for k, v in resp.cookies.items())
        if not cookie:
            raise EnvError("no_session", "seed_session answered without a session cookie")
        return NemoGymEpisode(self.client, row, cookie)

    async def aclose(self) -> None:
        await self.client.aclose()
