"""Async HTTP client of the NeMo Gym resources-server protocol (what the orchestrator's nemo-gym taskset uses).

    async with NemoGymClient("http://127.0.0.1:9100") as client:
        session = await client.seed(row)
        text = await client.call_tool(session, "submit_schedule", {"schedule": [0] * 24})
        result = await client.verify(session, row, response=responses_object)  # row + reward, mask_sample, ...
        await client.close(session)

Works with any NeMo Gym resources server (nemo-gym 0.7's and `env-server serve`): every cookie a server sets (NeMo
Gym names its session cookie `<ServerClass>___<name>` and re-sets it on each answer) is kept per session and sent
back; the close body is 0.7's `{resources_session_id, episode_id}`, which both accept. One `httpx.AsyncClient`
pool set is shared by all sessions and its own cookie jar is disabled, so concurrent sessions never mix.

Retries (tenacity) repeat only what cannot have run twice: a connect error or pool timeout (the request was never
sent) and a `503` without `failure_kind` (back-pressure, refused before processing; `Retry-After` is honoured),
with exponential backoff and jitter until `retry_deadline_s`. A read timeout or a dropped connection after a
seed, tool call or verify was sent is not retried (the server may have run it): the call fails with
`NemoGymError` (`transport_timeout` / `transport_peer_drop`), which masks the rollout. `close` is idempotent, so
it also retries those, up to `close_deadline_s`. A `503` carrying `failure_kind` (a server started with
`--masked-as-error`) is an unmeasurable episode: a masked verify result, or `NemoGymError` for a tool call.
"""

from __future__ import annotations

import http.cookiejar
import json
import random
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, RetryError, retry_if_exception, stop_before_delay


class NemoGymError(RuntimeError):
    """The server could not serve the episode. `kind`: `unavailable` (safe retries exhausted),
    `transport_timeout` / `transport_peer_drop` (a sent request got no answer; not retried), a server's
    `failure_kind` (e.g. `session_lost`), `http_<status>` (e.g. 401, 422), `protocol`."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(f"{kind}: {message}")
        self.kind, self.status = kind, status


@dataclass
class Session:
    """A seeded episode: the cookies the server set (kept current), the connection shard it is pinned to, and
    the ids its close names (`resources_session_id`, `episode_id.rollout_id`)."""

    cookies: dict[str, str]
    shard: int = 0
    resources_session_id: str = field(default_factory=lambda: f"prime-rl-{uuid.uuid4().hex}")
    rollout_id: str = field(default_factory=lambda: uuid.uuid4().hex)


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


class _Backpressure(Exception):
    def __init__(self, resp: httpx.Response):
        super().__init__(f"503 {resp.text[:200]}")
        self.retry_after = _retry_after(resp)


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class NemoGymClient:
    """Client of one resources server.

    Args:
        base_url: e.g. `http://127.0.0.1:9100`.
        request_timeout: seconds for a request once connected (read/write/pool).
        connect_timeout: seconds to connect.
        retry_deadline_s: total seconds a call keeps retrying what is safe to retry (see the module docstring).
        close_deadline_s: the same for `close` (default: min(retry_deadline_s, 5)): a shutdown waits on it, and
            `rl` gives the orchestrator 10 s after SIGTERM.
        token: bearer token (server started with `--token`).
        max_connections: connections in all (>= the rollouts you run at once).
        shards: independent connection pools the connections are split over (default: one per 4 connections, at
            most 16). httpx's pool costs O(connections x waiting requests) per request; measured with 64
            concurrent rollouts on 2 cores: 1 pool of 64 -> 32 rollouts/s, 16 pools of 4 -> 169 rollouts/s.
        backoff_s, max_backoff_s: first and largest retry delay (doubling, with jitter).
    """

    def __init__(self, base_url: str, request_timeout: float = 600.0, connect_timeout: float = 10.0,
                 retry_deadline_s: float = 120.0, token: str | None = None, max_connections: int = 256,
                 backoff_s: float = 0.05, max_backoff_s: float = 5.0, shards: int | None = None,
                 close_deadline_s: float | None = None):  # fmt: skip
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
        self.close_deadline_s = min(retry_deadline_s, 5.0) if close_deadline_s is None else close_deadline_s

    async def __aenter__(self) -> NemoGymClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pools."""
        for pool in self._pools:
            await pool.aclose()

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff with jitter; a `Retry-After` sets the floor."""
        delay = min(self.backoff_s * 2 ** (state.attempt_number - 1), self.max_backoff_s)
        exc = state.outcome.exception() if state.outcome else None
        ra = exc.retry_after if isinstance(exc, _Backpressure) else None
        return delay * (0.5 + random.random()) if ra is None else ra + delay * random.random()

    async def _post(self, path: str, content: bytes, session: Session | None = None, *, shard: int = 0,
                    idempotent: bool = False, deadline_s: float | None = None) -> httpx.Response:  # fmt: skip
        """POST, retrying only what is safe (see the module docstring); returns the final response and keeps the
        cookies it sets on `session`. Raises NemoGymError (`unavailable`, `transport_timeout`, ...)."""
        headers = {"Content-Type": "application/json"}
        if session is not None and session.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in session.cookies.items())
        pool = self._pools[shard % len(self._pools)]
        safe = (httpx.TransportError, _Backpressure) if idempotent else (*_NOT_SENT, _Backpressure)

        async def attempt() -> httpx.Response:
            resp = await pool.post(path, content=content, headers=headers)
            if resp.status_code == 503 and _failure_kind(resp) is None:
                raise _Backpressure(resp)
            return resp

        deadline = self.retry_deadline_s if deadline_s is None else deadline_s
        retrying = AsyncRetrying(stop=stop_before_delay(deadline), wait=self._wait,
                                 retry=retry_if_exception(lambda e: isinstance(e, safe)))  # fmt: skip
        try:
            resp = await retrying(attempt)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise NemoGymError("unavailable", f"POST {path} failed for {deadline:.0f} s: {type(last).__name__}: {last}") from last
        except httpx.TimeoutException as e:
            raise NemoGymError("transport_timeout", f"POST {path} was sent but not answered in time ({e!r}); not "
                               "retried, the server may have run it") from e  # fmt: skip
        except httpx.TransportError as e:
            raise NemoGymError("transport_peer_drop", f"POST {path} was sent but the connection failed ({e!r}); "
                               "not retried, the server may have run it") from e  # fmt: skip
        if session is not None:
            session.cookies.update(_set_cookies(resp))
        return resp

    async def health(self) -> dict[str, Any]:
        """`GET /health` (includes `max_concurrent` and `live_sessions` for our server). Raises httpx errors."""
        resp = await self._http.get("/health")
        resp.raise_for_status()
        return resp.json()

    async def seed(self, row: dict[str, Any]) -> Session:
        """Start an episode of `row` (the row is the seed body). Raises NemoGymError (`http_422` for a bad row,
        `unavailable`, `protocol` when the server set no cookie, ...)."""
        shard = self._next = (self._next + 1) % len(self._pools)
        resp = await self._post("/seed_session", _dumps(row), shard=shard)
        _raise_for(resp, "/seed_session")
        cookies = _set_cookies(resp)
        if not cookies:
            raise NemoGymError("protocol", "/seed_session answered without a session cookie", resp.status_code)
        return Session(cookies, shard)

    async def call_tool(self, session: Session, name: str, arguments: dict[str, Any] | str) -> str:
        """Run tool `name`; `arguments` is the tool's JSON (a dict, or the model's raw JSON string, sent as is).
        Returns what the model reads: the `output` text of a `{"output": ...}` answer (ours), else the body as the
        server sent it (NeMo Gym tools answer their own JSON). Raises NemoGymError when the episode cannot go on
        (masked-as-error servers) or the request failed."""
        raw = arguments.encode() if isinstance(arguments, str) else _dumps(arguments)
        resp = await self._post(f"/{name}", raw, session, shard=session.shard)
        _raise_for(resp, f"/{name}")
        try:
            body = resp.json()
        except ValueError:
            return resp.text
        if isinstance(body, dict) and isinstance(body.get("output"), str) and set(body) <= {"output", "failure_kind"}:
            return body["output"]
        return resp.text

    async def verify(self, session: Session, row: dict[str, Any], response: Any = None) -> dict[str, Any]:
        """Score the episode: `response` is the model's trajectory as a Responses API object (text is accepted by
        our server). Returns the server's answer: the row plus `reward`, `mask_sample`, `failure_kind`, ... An
        unmeasurable episode comes back masked (also from a `--masked-as-error` server's 503). Never re-sent once
        it may have reached the server."""
        resp = await self._post("/verify", _dumps({**row, "response": response}), session, shard=session.shard)
        kind = _failure_kind(resp) if resp.status_code == 503 else None
        if kind is not None:
            reason = resp.json().get("failure_reason", "")
            return {**row, "reward": 0.0, "mask_sample": True, "failure_kind": kind, "failure_reason": reason,
                    "metrics": {}}  # fmt: skip
        _raise_for(resp, "/verify")
        try:
            out = resp.json()
        except ValueError:
            raise NemoGymError("protocol", f"/verify answered non-JSON: {resp.text[:200]!r}", resp.status_code) from None
        if not isinstance(out, dict):
            raise NemoGymError("protocol", f"/verify answered {type(out).__name__}, not an object", resp.status_code)
        return out

    async def close(self, session: Session) -> None:
        """End the episode (`{resources_session_id, episode_id}` plus the session's cookies; idempotent, retried up
        to `close_deadline_s`). Raises NemoGymError when the server refused it or could not be reached."""
        body = {"resources_session_id": session.resources_session_id,
                "episode_id": {"rollout_id": session.rollout_id, "attempt": 0}}  # fmt: skip
        resp = await self._post("/close_session", _dumps(body), session, shard=session.shard, idempotent=True,
                                deadline_s=self.close_deadline_s)  # fmt: skip
        _raise_for(resp, "/close_session")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _set_cookies(resp: httpx.Response) -> dict[str, str]:
    """Every cookie a response sets, by name (whatever the name; NeMo Gym's are `<ServerClass>___<name>`)."""
    out: dict[str, str] = {}
    for header in resp.headers.get_list("set-cookie"):
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(header)
        except Exception:  # noqa: BLE001 - an unparsable cookie is one the server cannot rely on either
            continue
        out.update({k: m.value for k, m in jar.items()})
    return out


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
