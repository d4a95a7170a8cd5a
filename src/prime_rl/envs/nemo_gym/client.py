"""Async HTTP client of the NeMo Gym resources-server protocol (what the orchestrator's nemo-gym taskset uses).

    async with NemoGymClient("http://127.0.0.1:9100") as client:
        session = await client.seed(row)
        text = await client.call_tool(session, "submit_schedule", {"schedule": [0] * 24})
        result = await client.verify(session, row, response=responses_object)  # row + reward, mask_sample, ...
        await client.close(session)

Works with any NeMo Gym resources server (nemo-gym 0.7's and `env-server serve`): every cookie a server sets (NeMo
Gym names its session cookie `<ServerClass>___<name>` and re-sets it on each answer) is kept per session and sent
back; the close body is 0.7's `{resources_session_id, episode_id}`, which both accept. Requests go through
prime-rl's one HTTP layer (`prime_rl.http`: one pooled keep-alive aiohttp session shared by all sessions, its
cookie jar disabled so concurrent sessions never mix, orjson with the standard library as fallback).

Retries (`prime_rl.http.RetryPolicy`, run by tenacity) repeat only what cannot have run twice: a connect error or a
timeout while connecting or waiting for a pooled connection (the request was never sent) and a `503` without
`failure_kind` (back-pressure, refused before processing; `Retry-After` is honoured),
with exponential backoff and jitter until `retry_deadline_s`. A read timeout or a dropped connection after a
seed, tool call or verify was sent is not retried (the server may have run it): the call fails with
`NemoGymError` (`transport_timeout` / `transport_peer_drop`), which masks the rollout. `close` is idempotent, so
it also retries those, up to `close_deadline_s`. A `503` carrying `failure_kind` (a server started with
`--masked-as-error`) is an unmeasurable episode: a masked verify result, or `NemoGymError` for a tool call.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

from prime_rl.envs.nemo_gym.protocol import masked_result
from prime_rl.http import (
    JSON_HEADERS,
    TRANSPORT_ERRORS,
    HttpClient,
    Response,
    RetriesExhausted,
    RetryPolicy,
    Timeouts,
    dumps,
)


class NemoGymError(RuntimeError):
    """The server could not serve the episode. `kind`: `unavailable` (safe retries exhausted),
    `transport_timeout` / `transport_peer_drop` (a sent request got no answer; not retried), a server's
    `failure_kind` (e.g. `session_lost`), `http_<status>` (e.g. 401, 422), `protocol`."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(f"{kind}: {message}")
        self.kind, self.status = kind, status


@dataclass
class Session:
    """A seeded episode: the cookies the server set (kept current) and the ids its close names
    (`resources_session_id`, `episode_id.rollout_id`)."""

    cookies: dict[str, str]
    resources_session_id: str = field(default_factory=lambda: f"prime-rl-{uuid.uuid4().hex}")
    rollout_id: str = field(default_factory=lambda: uuid.uuid4().hex)


class NemoGymClient:
    """Client of one resources server.

    Args:
        base_url: e.g. `http://127.0.0.1:9100`.
        request_timeout: seconds a sent request may wait for (each part of) its answer; also the most a request
            waits for a free connection of the pool.
        connect_timeout: seconds to connect.
        retry_deadline_s: total seconds a call keeps retrying what is safe to retry (see the module docstring).
        close_deadline_s: the same for `close` (default: min(retry_deadline_s, 5)): a shutdown waits on it, and
            `rl` gives the orchestrator 10 s after SIGTERM.
        token: bearer token (server started with `--token`).
        max_connections: connections in all (>= the rollouts you run at once).
        backoff_s, max_backoff_s: first and largest retry delay (doubling, with jitter).

    The aiohttp session is made on first use, inside the running event loop.
    """

    def __init__(self, base_url: str, request_timeout: float = 600.0, connect_timeout: float = 10.0,
                 retry_deadline_s: float = 120.0, token: str | None = None, max_connections: int = 256,
                 backoff_s: float = 0.05, max_backoff_s: float = 5.0,
                 close_deadline_s: float | None = None):  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections
        self.http = HttpClient(Timeouts(connect_s=connect_timeout, read_s=request_timeout),
                               headers={"Authorization": f"Bearer {token}"} if token else None,
                               max_connections=max_connections)  # fmt: skip
        self.retry_deadline_s, self.backoff_s, self.max_backoff_s = retry_deadline_s, backoff_s, max_backoff_s
        self.close_deadline_s = min(retry_deadline_s, 5.0) if close_deadline_s is None else close_deadline_s

    async def __aenter__(self) -> NemoGymClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    def _retry(self, deadline_s: float) -> RetryPolicy:
        """Exponential backoff from `backoff_s` doubling to `max_backoff_s`, with jitter, for `deadline_s`."""
        return RetryPolicy(deadline_s=deadline_s, first_wait_s=self.backoff_s, max_wait_s=self.max_backoff_s,
                           jitter=True)  # fmt: skip

    async def _post(self, path: str, content: bytes, session: Session | None = None, *, idempotent: bool = False,
                    deadline_s: float | None = None) -> Response:  # fmt: skip
        """POST, retrying only what is safe (see the module docstring); returns the final response and keeps the
        cookies it sets on `session`. Raises NemoGymError (`unavailable`, `transport_timeout`, ...)."""
        headers = JSON_HEADERS
        if session is not None and session.cookies:
            headers = {**JSON_HEADERS, "Cookie": "; ".join(f"{k}={v}" for k, v in session.cookies.items())}
        deadline = self.retry_deadline_s if deadline_s is None else deadline_s
        try:
            resp = await self.http.request("POST", self.base_url + path, data=content, headers=headers,
                                           idempotent=idempotent, retry=self._retry(deadline),
                                           retry_on=_backpressure)  # fmt: skip
        except RetriesExhausted as e:
            raise NemoGymError("unavailable", f"POST {path} failed for {deadline:.0f} s: {type(e.last).__name__}: "
                               f"{e.last}") from e.last  # fmt: skip
        except TimeoutError as e:  # aiohttp's read timeouts are TimeoutErrors too
            raise NemoGymError("transport_timeout", f"POST {path} was sent but not answered in time ({e!r}); not "
                               "retried, the server may have run it") from e  # fmt: skip
        except TRANSPORT_ERRORS as e:
            raise NemoGymError("transport_peer_drop", f"POST {path} was sent but the connection failed ({e!r}); "
                               "not retried, the server may have run it") from e  # fmt: skip
        if session is not None:
            session.cookies.update(_set_cookies(resp))
        return resp

    async def health(self) -> dict[str, Any]:
        """`GET /health` (includes `max_concurrent` and `live_sessions` for our server). Raises aiohttp/OS errors
        when unreachable, NemoGymError on a non-200 answer, ValueError on a non-JSON one."""
        resp = await self.http.send("GET", self.base_url + "/health")
        if resp.status != 200:
            raise NemoGymError(f"http_{resp.status}", f"GET /health: {resp.text[:500]}", resp.status)
        return resp.json()

    async def seed(self, row: dict[str, Any]) -> Session:
        """Start an episode of `row` (the row is the seed body). Raises NemoGymError (`http_422` for a bad row,
        `unavailable`, `protocol` when the server set no cookie, ...)."""
        resp = await self._post("/seed_session", dumps(row))
        _raise_for(resp, "/seed_session")
        cookies = _set_cookies(resp)
        if not cookies:
            raise NemoGymError("protocol", "/seed_session answered without a session cookie", resp.status)
        return Session(cookies)

    async def call_tool(self, session: Session, name: str, arguments: dict[str, Any] | str) -> str:
        """Run tool `name`; `arguments` is the tool's JSON (a dict, or the model's raw JSON string, sent as is).
        Returns what the model reads: the `output` text of a `{"output": ...}` answer (ours), else the body as the
        server sent it (NeMo Gym tools answer their own JSON). Raises NemoGymError when the episode cannot go on
        (masked-as-error servers) or the request failed."""
        raw = arguments.encode() if isinstance(arguments, str) else dumps(arguments)
        resp = await self._post(f"/{name}", raw, session)
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
        resp = await self._post("/verify", dumps({**row, "response": response}), session)
        kind = _failure_kind(resp) if resp.status == 503 else None
        if kind is not None:
            reason = resp.json().get("failure_reason", "")
            return {**row, **masked_result(kind, reason)}
        _raise_for(resp, "/verify")
        try:
            out = resp.json()
        except ValueError:
            raise NemoGymError("protocol", f"/verify answered non-JSON: {resp.text[:200]!r}", resp.status) from None
        if not isinstance(out, dict):
            raise NemoGymError("protocol", f"/verify answered {type(out).__name__}, not an object", resp.status)
        return out

    async def close(self, session: Session) -> None:
        """End the episode (`{resources_session_id, episode_id}` plus the session's cookies; idempotent, retried up
        to `close_deadline_s`). Raises NemoGymError when the server refused it or could not be reached."""
        body = {"resources_session_id": session.resources_session_id,
                "episode_id": {"rollout_id": session.rollout_id, "attempt": 0}}  # fmt: skip
        resp = await self._post("/close_session", dumps(body), session, idempotent=True,
                                deadline_s=self.close_deadline_s)  # fmt: skip
        _raise_for(resp, "/close_session")


def _set_cookies(resp: Response) -> dict[str, str]:
    """Every cookie a response sets, by name (whatever the name; NeMo Gym's are `<ServerClass>___<name>`)."""
    out: dict[str, str] = {}
    for header in resp.headers.getall("set-cookie", []):
        out.update(_parse_set_cookie(header))
    return out


@functools.lru_cache(maxsize=4096)
def _parse_set_cookie(header: str) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs of one `Set-Cookie` header; () when it does not parse. Cached: NeMo Gym re-sets the
    same cookie on every answer of a session, and `SimpleCookie` took ~3% of the client's CPU."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # noqa: BLE001 - an unparsable cookie is one the server cannot rely on either
        return ()
    return tuple((k, m.value) for k, m in jar.items())


def _failure_kind(resp: Response) -> str | None:
    try:
        body = resp.json()
    except ValueError:
        return None
    return body.get("failure_kind") if isinstance(body, dict) else None


def _backpressure(resp: Response) -> bool:
    """A `503` without `failure_kind`: the server refused the request before processing it (send it again)."""
    return resp.status == 503 and _failure_kind(resp) is None


def _raise_for(resp: Response, path: str) -> None:
    if resp.status < 400:
        return
    kind = _failure_kind(resp) if resp.status == 503 else None
    raise NemoGymError(kind or f"http_{resp.status}", f"POST {path}: {resp.text[:500]}", resp.status)
