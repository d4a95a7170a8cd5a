"""Async HTTP client of the NeMo Gym resources-server protocol (what the orchestrator's nemo-gym taskset uses).

    async with NemoGymClient("http://127.0.0.1:9100") as client:
        session = await client.seed(row)
        text = await client.call_tool(session, "submit_schedule", {"schedule": [0] * 24})
        result = await client.verify(session, row, response="done")   # row + reward, mask_sample, ...
        await client.close(session)

One `httpx.AsyncClient` is shared by all sessions; each session's cookie is sent explicitly and the client's own
cookie jar is disabled, so concurrent sessions never mix. `503` without a `failure_kind` (capacity back-pressure)
and transport errors are retried with exponential backoff (honouring `Retry-After`) until `retry_deadline_s`;
a `503` carrying `failure_kind` (a server started with `--masked-as-error`) is an unmeasurable episode and is
turned into a masked verify result (or `NemoGymError` for tool calls), never retried.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

COOKIE = "session"


class NemoGymError(RuntimeError):
    """The server could not serve the episode. `kind`: `unavailable` (retries exhausted), `unknown_session`,
    `expired_session`, `closed_session`, `episode_error`, `http_<status>` (e.g. 401, 422)."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(f"{kind}: {message}")
        self.kind, self.status = kind, status


@dataclass
class Session:
    """A seeded episode: the signed cookie the server gave (opaque) and the connection shard it is pinned to."""

    cookie: str
    shard: int = 0


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


class NemoGymClient:
    """Client of one resources server.

    Args:
        base_url: e.g. `http://127.0.0.1:9100`.
        request_timeout: seconds for a request once connected (read/write/pool).
        connect_timeout: seconds to connect.
        retry_deadline_s: total seconds a call keeps retrying 503 / transport errors.
        token: bearer token (server started with `--token`).
        max_connections: connections in all (>= the rollouts you run at once).
        shards: independent connection pools the connections are split over (default: one per 4 connections, at
            most 16). httpx's pool costs O(connections x waiting requests) per request; measured with 64
            concurrent rollouts on 2 cores: 1 pool of 64 -> 32 rollouts/s, 16 pools of 4 -> 169 rollouts/s.
        backoff_s, max_backoff_s: first and largest retry delay (doubling, with jitter).
    """

    def __init__(self, base_url: str, request_timeout: float = 600.0, connect_timeout: float = 10.0,
                 retry_deadline_s: float = 120.0, token: str | None = None, max_connections: int = 256,
                 backoff_s: float = 0.05, max_backoff_s: float = 5.0, shards: int | None = None):  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        n = shards or max(1, min(16, max_connections // 4))
        per = max(1, -(-max_connections // n))
        self._pools = [
            httpx.AsyncClient(
                base_url=base_url.rstrip("/"),
                timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
                limits=httpx.Limits(max_connections=per, max_keepalive_connections=per),
                headers=headers,
                cookies=http.cookiejar.CookieJar(policy=_NoCookies()),
            )
            for _ in range(n)
        ]
        self._http = self._pools[0]
        self._next = 0
        self.retry_deadline_s, self.backoff_s, self.max_backoff_s = retry_deadline_s, backoff_s, max_backoff_s

    async def __aenter__(self) -> NemoGymClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pools."""
        for pool in self._pools:
            await pool.aclose()

    async def _post(
        self, path: str, body: Any, cookie: str | None = None, *, raw: bytes | None = None, shard: int = 0
    ) -> httpx.Response:
        """POST with retries of transport errors and back-pressure 503s; returns the final response."""
        headers = {"Content-Type": "application/json"}
        if cookie is not None:
            headers["Cookie"] = f"{COOKIE}={cookie}"
        content = raw if raw is not None else json.dumps(body, separators=(",", ":")).encode()
        deadline = time.monotonic() + self.retry_deadline_s
        delay, last = self.backoff_s, "no attempt"
        while True:
            try:
                resp = await self._pools[shard % len(self._pools)].post(path, content=content, headers=headers)
                if resp.status_code != 503 or _failure_kind(resp) is not None:
                    return resp
                last = f"503 {resp.text[:200]}"
                ra = _retry_after(resp)
                wait = delay * (0.5 + random.random()) if ra is None else ra + delay * random.random()
            except httpx.TransportError as e:
                last, wait = f"{type(e).__name__}: {e}", delay * (0.5 + random.random())
            if time.monotonic() + wait > deadline:
                raise NemoGymError("unavailable", f"POST {path} failed for {self.retry_deadline_s:.0f} s: {last}")
            await asyncio.sleep(wait)
            delay = min(delay * 2, self.max_backoff_s)

    async def health(self) -> dict[str, Any]:
        """`GET /health` (includes `max_concurrent` and `live_sessions` for our server). Raises httpx errors."""
        resp = await self._http.get("/health")
        resp.raise_for_status()
        return resp.json()

    async def seed(self, row: dict[str, Any]) -> Session:
        """Start an episode of `row`. Raises NemoGymError (`http_422` for a bad row, `unavailable`...)."""
        shard = self._next = (self._next + 1) % len(self._pools)
        resp = await self._post("/seed_session", row, shard=shard)
        _raise_for(resp, "/seed_session")
        cookie = resp.cookies.get(COOKIE)
        if not cookie:
            raise NemoGymError("protocol", "/seed_session answered without a session cookie", resp.status_code)
        return Session(cookie, shard)

    async def call_tool(self, session: Session, name: str, arguments: dict[str, Any] | str) -> str:
        """Run tool `name`; `arguments` is the tool's JSON (a dict, or the model's raw JSON string, sent as is).
        Returns the result text (including the tool's own error texts for bad arguments).
        Raises NemoGymError when the episode cannot go on (masked-as-error servers) or the server fails."""
        raw = arguments.encode() if isinstance(arguments, str) else None
        resp = await self._post(f"/{name}", arguments, session.cookie, raw=raw, shard=session.shard)
        _raise_for(resp, f"/{name}")
        return resp.text

    async def verify(self, session: Session, row: dict[str, Any], response: Any = None) -> dict[str, Any]:
        """Score the episode: `response` is the model's final response (Responses API object or text).
        Returns the row plus `reward`, `mask_sample`, `failure_kind`, `failure_reason`, `metrics`; an
        unmeasurable episode comes back masked (also from a `--masked-as-error` server's 503)."""
        resp = await self._post("/verify", {**row, "response": response}, session.cookie, shard=session.shard)
        kind = _failure_kind(resp) if resp.status_code == 503 else None
        if kind is not None:
            reason = resp.json().get("failure_reason", "")
            return {**row, "reward": 0.0, "mask_sample": True, "failure_kind": kind, "failure_reason": reason,
                    "metrics": {}}  # fmt: skip
        _raise_for(resp, "/verify")
        return resp.json()

    async def close(self, session: Session) -> None:
        """End the episode (idempotent; errors are swallowed after the retry deadline: the server reaps idle
        sessions anyway)."""
        try:
            await self._post("/close_session", {}, session.cookie, shard=session.shard)
        except NemoGymError:
            pass


def _failure_kind(resp: httpx.Response) -> str | None:
    try:
        body = resp.json()
    except ValueError:
        return None
    return body.get("failure_kind") if isinstance(body, dict) else None


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds of a `Retry-After: <seconds>` header (None when absent or an HTTP date)."""
    try:
        return max(float(resp.headers.get("retry-after", "")), 0.0)
    except ValueError:
        return None


def _raise_for(resp: httpx.Response, path: str) -> None:
    if resp.status_code < 400:
        return
    kind = _failure_kind(resp) if resp.status_code == 503 else None
    raise NemoGymError(kind or f"http_{resp.status_code}", f"POST {path}: {resp.text[:500]}", resp.status_code)
