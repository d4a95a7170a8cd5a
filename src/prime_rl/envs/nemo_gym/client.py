"""Async HTTP client of the NeMo Gym resources-server protocol (what the orchestrator's nemo-gym taskset uses).

    async with NemoGymClient("http://127.0.0.1:9100") as client:
        session = await client.seed(row)
        text = await client.call_tool(session, "submit_schedule", {"schedule": [0] * 24})
        result = await client.verify(session, row, response=responses_object)  # row + reward, mask_sample, ...
        await client.close(session)

Works with any NeMo Gym resources server (nemo-gym 0.7's and `env-server serve`): every cookie a server sets (NeMo
Gym names its session cookie `<ServerClass>___<name>` and re-sets it on each answer) is kept per session and sent
back; the close body is 0.7's `{resources_session_id, episode_id}`, which both accept. One aiohttp `ClientSession`
(one pooled keep-alive connector) is shared by all sessions and its cookie jar is disabled, so concurrent sessions
never mix. aiohttp rather than httpx: the client's own CPU per request bounds how many rollouts one orchestrator
plays, and aiohttp's is several times lower under many concurrent requests (`benchmarks/env_server.py` measures it;
recorded numbers in docs/results/).

Retries (tenacity) repeat only what cannot have run twice: a connect error or a timeout while connecting or waiting
for a pooled connection (the request was never sent) and a `503` without `failure_kind` (back-pressure, refused before processing; `Retry-After` is honoured),
with exponential backoff and jitter until `retry_deadline_s`. A read timeout or a dropped connection after a
seed, tool call or verify was sent is not retried (the server may have run it): the call fails with
`NemoGymError` (`transport_timeout` / `transport_peer_drop`), which masks the rollout. `close` is idempotent, so
it also retries those, up to `close_deadline_s`. A `503` carrying `failure_kind` (a server started with
`--masked-as-error`) is an unmeasurable episode: a masked verify result, or `NemoGymError` for a tool call.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import aiohttp

try:  # a dependency of prime-rl, but the peers' venvs (tests/interop) import this module without it
    import orjson
except ImportError:  # pragma: no cover - exercised in the peer venvs
    orjson = None
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
    """A seeded episode: the cookies the server set (kept current) and the ids its close names
    (`resources_session_id`, `episode_id.rollout_id`)."""

    cookies: dict[str, str]
    resources_session_id: str = field(default_factory=lambda: f"prime-rl-{uuid.uuid4().hex}")
    rollout_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class Response:
    """An answer: HTTP `status`, the `set-cookie` header values, `Retry-After`, and the body."""

    status: int
    set_cookie: list[str]
    retry_after: str | None
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON. Raises ValueError when it is not JSON."""
        return _loads(self.body)


class _Backpressure(Exception):
    def __init__(self, resp: Response):
        super().__init__(f"503 {resp.text[:200]}")
        self.retry_after = _retry_after(resp)


# never reached the server: no connection was made (refused, unreachable) or none came free in time
_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# anything below HTTP once a request may have been sent (dropped connection, read timeout, bad framing)
_TRANSPORT = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError, OSError)
_JSON = {"Content-Type": "application/json"}


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
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=None, connect=request_timeout, sock_connect=connect_timeout,
                                              sock_read=request_timeout)  # fmt: skip
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self.retry_deadline_s, self.backoff_s, self.max_backoff_s = retry_deadline_s, backoff_s, max_backoff_s
        self.close_deadline_s = min(retry_deadline_s, 5.0) if close_deadline_s is None else close_deadline_s

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0),
                timeout=self._timeout, headers=self._headers, cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def __aenter__(self) -> NemoGymClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _delay(self, attempt: int, exc: BaseException | None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1 = the first): exponential backoff with jitter;
        a `Retry-After` sets the floor."""
        delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
        ra = exc.retry_after if isinstance(exc, _Backpressure) else None
        return delay * (0.5 + random.random()) if ra is None else ra + delay * random.random()

    async def _request(self, method: str, path: str, content: bytes | None = None,
                       headers: dict[str, str] | None = None) -> Response:  # fmt: skip
        async with self._http().request(method, self.base_url + path, data=content, headers=headers) as r:
            return Response(r.status, r.headers.getall("set-cookie", []), r.headers.get("retry-after"), await r.read())

    async def _post(self, path: str, content: bytes, session: Session | None = None, *, idempotent: bool = False,
                    deadline_s: float | None = None) -> Response:  # fmt: skip
        """POST, retrying only what is safe (see the module docstring); returns the final response and keeps the
        cookies it sets on `session`. Raises NemoGymError (`unavailable`, `transport_timeout`, ...)."""
        headers = _JSON
        if session is not None and session.cookies:
            headers = {**_JSON, "Cookie": "; ".join(f"{k}={v}" for k, v in session.cookies.items())}
        safe = (*_TRANSPORT, _Backpressure) if idempotent else (*_NOT_SENT, _Backpressure)

        async def attempt() -> Response:
            resp = await self._request("POST", path, content, headers)
            if resp.status == 503 and _failure_kind(resp) is None:
                raise _Backpressure(resp)
            return resp

        deadline = self.retry_deadline_s if deadline_s is None else deadline_s
        try:
            resp = await self._with_retries(attempt, safe, deadline)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise NemoGymError("unavailable", f"POST {path} failed for {deadline:.0f} s: {type(last).__name__}: {last}") from last
        except TimeoutError as e:  # aiohttp's read timeouts are TimeoutErrors too
            raise NemoGymError("transport_timeout", f"POST {path} was sent but not answered in time ({e!r}); not "
                               "retried, the server may have run it") from e  # fmt: skip
        except _TRANSPORT as e:
            raise NemoGymError("transport_peer_drop", f"POST {path} was sent but the connection failed ({e!r}); "
                               "not retried, the server may have run it") from e  # fmt: skip
        if session is not None:
            session.cookies.update(_set_cookies(resp))
        return resp

    async def _with_retries(self, attempt: Any, safe: tuple[type[BaseException], ...], deadline: float) -> Response:
        """`attempt()`, then (tenacity) again after each failure in `safe` (`_delay` apart) while the next try would
        start within `deadline` seconds of the first; tenacity's RetryError when they ran out. The first try runs
        outside tenacity: its per-call machinery (~50 us) is a tenth of what a request costs the client."""
        t0 = time.monotonic()
        try:
            return await attempt()
        except safe as e:
            first = e
        state = RetryCallState(None, None, (), {})  # the first failure, as tenacity reports a last attempt
        state.set_exception((type(first), first, first.__traceback__))
        wait = self._delay(1, first)
        if time.monotonic() - t0 + wait > deadline:
            raise RetryError(state.outcome) from first
        await asyncio.sleep(wait)
        left = deadline - (time.monotonic() - t0)
        retrying = AsyncRetrying(
            stop=stop_before_delay(left),
            wait=lambda s: self._delay(s.attempt_number + 1, s.outcome.exception() if s.outcome else None),
            retry=retry_if_exception(lambda e: isinstance(e, safe)),
        )
        return await retrying(attempt)

    async def health(self) -> dict[str, Any]:
        """`GET /health` (includes `max_concurrent` and `live_sessions` for our server). Raises aiohttp/OS errors
        when unreachable, NemoGymError on a non-200 answer, ValueError on a non-JSON one."""
        resp = await self._request("GET", "/health")
        if resp.status != 200:
            raise NemoGymError(f"http_{resp.status}", f"GET /health: {resp.text[:500]}", resp.status)
        return resp.json()

    async def seed(self, row: dict[str, Any]) -> Session:
        """Start an episode of `row` (the row is the seed body). Raises NemoGymError (`http_422` for a bad row,
        `unavailable`, `protocol` when the server set no cookie, ...)."""
        resp = await self._post("/seed_session", _dumps(row))
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
        raw = arguments.encode() if isinstance(arguments, str) else _dumps(arguments)
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
        resp = await self._post("/verify", _dumps({**row, "response": response}), session)
        kind = _failure_kind(resp) if resp.status == 503 else None
        if kind is not None:
            reason = resp.json().get("failure_reason", "")
            return {**row, "reward": 0.0, "mask_sample": True, "failure_kind": kind, "failure_reason": reason,
                    "metrics": {}}  # fmt: skip
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
        resp = await self._post("/close_session", _dumps(body), session, idempotent=True,
                                deadline_s=self.close_deadline_s)  # fmt: skip
        _raise_for(resp, "/close_session")


_ORJSON_OPTS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS if orjson else 0
)


def _dumps(obj: Any) -> bytes:
    """Compact JSON of a request body: orjson (a GridSim row took ~8% of the client's CPU with `json`), else `json`
    where the two would not send the same value: what orjson refuses (non-string keys, huge ints, lone surrogates,
    types JSON has no form for) and NaN/Infinity, which orjson writes as `null` (so any `null` takes `json`)."""
    if orjson is None:
        return json.dumps(obj, separators=(",", ":")).encode()
    try:
        out = orjson.dumps(obj, option=_ORJSON_OPTS)
    except TypeError:
        out = b"null"
    if b"null" in out:
        return json.dumps(obj, separators=(",", ":")).encode()
    return out


_LONG_DIGITS = re.compile(rb"\d{19}")


def _loads(raw: bytes) -> Any:
    """JSON of an answer: orjson, else `json` where the two would not read the same value: what orjson refuses
    (NaN/Infinity literals, other encodings than UTF-8) and integers of 19 digits or more (orjson reads those
    past 64 bits as floats). Raises ValueError when it is not JSON."""
    if orjson is not None and _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def _set_cookies(resp: Response) -> dict[str, str]:
    """Every cookie a response sets, by name (whatever the name; NeMo Gym's are `<ServerClass>___<name>`)."""
    out: dict[str, str] = {}
    for header in resp.set_cookie:
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


def _retry_after(resp: Response) -> float | None:
    """Seconds of a `Retry-After: <seconds>` header (None when absent or an HTTP date)."""
    try:
        return max(float(resp.retry_after or ""), 0.0)
    except ValueError:
        return None


def _raise_for(resp: Response, path: str) -> None:
    if resp.status < 400:
        return
    kind = _failure_kind(resp) if resp.status == 503 else None
    raise NemoGymError(kind or f"http_{resp.status}", f"POST {path}: {resp.text[:500]}", resp.status)
