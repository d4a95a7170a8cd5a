"""prime-rl's one HTTP layer: every client of a prime-rl or peer server (the inference client, the NeMo Gym client,
the OpenEnv helpers) sends through `HttpClient`.

- **Session lifetime.** One aiohttp `ClientSession` per `HttpClient` (one pooled keep-alive connector, no cookie
  jar, so concurrent episodes never mix cookies), made on first use inside the running event loop and closed by
  `aclose` (or `async with`). aiohttp rather than httpx: the client's own CPU per request bounds how many rollouts
  one orchestrator drives, and aiohttp's is several times lower under many concurrent requests
  (`benchmarks/orchestrator.py`, `benchmarks/env_server.py`; numbers in docs/performance.md).
- **JSON.** `dumps`/`loads`: orjson, with the standard library as the one fallback wherever the two would not
  carry the same value (see each). orjson is optional: the peers' virtual environments (tests/interop) import
  this module without it.
- **Timeouts** (`Timeouts`): connecting, and waiting for each part of an answer (also the most a request waits
  for a free pooled connection); a per-call total for probes.
- **Retries** (`RetryPolicy`, run by tenacity): exponential backoff, optionally with jitter and a `Retry-After`
  floor, bounded by a number of retries and/or a deadline. A call marked `idempotent` is sent again after any
  transport error or an answer the caller names retryable; any other call only after an error that proves it
  never left (`NOT_SENT`: no connection could be made or none came free in time) or an answer the caller says
  was refused before processing. A non-idempotent call is never re-sent once it may have reached the server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    stop_never,
)

try:  # a dependency of prime-rl, but the peers' venvs (tests/interop) import this module without it
    import orjson
except ImportError:  # pragma: no cover - exercised in the peer venvs
    orjson = None  # type: ignore[assignment]

# never reached the server: no connection was made (refused, unreachable) or none came free in time
NOT_SENT: tuple[type[BaseException], ...] = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# anything below HTTP once a request may have been sent (dropped connection, read timeout, bad framing)
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError, OSError)  # fmt: skip
JSON_HEADERS = {"Content-Type": "application/json"}


# -- JSON ------------------------------------------------------------------------------------------------------------
_ORJSON_OPTS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS if orjson else 0
)


def dumps(obj: Any) -> bytes:
    """Compact JSON of a request body: orjson (a GridSim row took ~8% of the NeMo Gym client's CPU with `json`), else
    `json` where the two would not send the same value: what orjson refuses (non-string keys, huge ints, lone
    surrogates, types JSON has no form for) and NaN/Infinity, which orjson writes as `null` (so any `null` takes
    `json`). Raises TypeError/ValueError for what neither can write."""
    if orjson is None:
        return json.dumps(obj, separators=(",", ":")).encode()
    try:
        out = orjson.dumps(obj, option=_ORJSON_OPTS)
    except TypeError:
        out = b"null"
    if b"null" in out:
        return json.dumps(obj, separators=(",", ":")).encode()
    return out


# an integer of 19 digits or more (not the fraction or exponent of a float)
_LONG_INT = re.compile(rb"(?<![\d.])\d{19,}(?![\d.eE])")


def loads(raw: bytes) -> Any:
    """JSON of an answer: orjson (a generate answer's per-token logprob objects took a fifth of the orchestrator's
    time with `json`), else `json` where the two would not read the same value: what orjson refuses (NaN/Infinity
    literals, encodings other than UTF-8) and integers of 19 digits or more (orjson reads those past 64 bits as
    floats). Raises ValueError when `raw` is not JSON."""
    if orjson is not None and _LONG_INT.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


# -- addresses -------------------------------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether a server bound to `host` is reachable from this machine only (`localhost`, 127.0.0.0/8, ::1). The
    wildcard binds (`0.0.0.0`, `::`, empty) and names other than localhost are not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- answers, timeouts, retries --------------------------------------------------------------------------------------
@dataclass
class Response:
    """An HTTP answer: `status`, `headers` (case-insensitive, repeated names kept: `getall("set-cookie", [])`) and
    the raw `body`."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        """The body as text (invalid UTF-8 replaced)."""
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON (`loads`). Raises ValueError when it is not JSON."""
        return loads(self.body)

    @property
    def retry_after_s(self) -> float | None:
        """Seconds of a `Retry-After: <seconds>` header (None when absent or an HTTP date)."""
        try:
            return max(float(self.headers.get("retry-after") or ""), 0.0)
        except ValueError:
            return None


@dataclass(frozen=True)
class Timeouts:
    """connect_s: seconds to open a connection; read_s: seconds a sent request may wait for each part of its answer,
    also the most it waits for a free connection of the pool."""

    connect_s: float = 10.0
    read_s: float = 600.0

    def client_timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, connect=self.read_s, sock_connect=self.connect_s, sock_read=self.read_s)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed call is sent again (which failures qualify: `HttpClient.request`).

    The k-th retry (k = 1, 2, ...) waits min(first_wait_s * 2^(k-1), max_wait_s), times a uniform draw in
    [0.5, 1.5) with `jitter`; an answer's `Retry-After` is a floor (then the jitter only adds). Retries stop after
    `max_retries` (None: no count) or when the next one would start more than `deadline_s` after the first attempt
    (None: no deadline); at least one of the two must be set.
    """

    max_retries: int | None = None
    deadline_s: float | None = None
    first_wait_s: float = 0.5
    max_wait_s: float = 8.0
    jitter: bool = False

    def __post_init__(self) -> None:
        if self.max_retries is None and self.deadline_s is None:
            raise ValueError("RetryPolicy needs max_retries or deadline_s (or both): retries must end")

    def wait_s(self, retry: int, failure: BaseException | None) -> float:
        """Seconds to wait before retry number `retry` (1 = the first) after `failure`."""
        delay = min(self.first_wait_s * 2 ** (retry - 1), self.max_wait_s)
        floor = failure.response.retry_after_s if isinstance(failure, RetryableAnswer) else None
        if floor is not None:
            return floor + delay * random.random() if self.jitter else max(floor, delay)
        return delay * (0.5 + random.random()) if self.jitter else delay


NO_RETRY = RetryPolicy(max_retries=0)


class RetryableAnswer(Exception):
    """An answer the caller's `retry_on` accepted as "not processed, send again" (internal to `request`; carried by
    `RetriesExhausted.last` when the retries ran out)."""

    def __init__(self, response: Response):
        super().__init__(f"answered {response.status}: {response.text[:500]}")
        self.response = response


class RetriesExhausted(RuntimeError):
    """A call failed on every attempt. `attempts`: how many were sent; `last`: the last failure (a transport error,
    or a `RetryableAnswer` holding the last answer)."""

    def __init__(self, method: str, url: str, attempts: int, last: BaseException):
        super().__init__(f"{method} {url} failed after {attempts} attempt{'s' * (attempts != 1)}: "
                         f"{type(last).__name__}: {last}")  # fmt: skip
        self.attempts, self.last = attempts, last


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)  # looked up at call time, so tests can replace asyncio.sleep


class HttpClient:
    """A pooled aiohttp session with prime-rl's JSON, timeouts and retry policy (module docstring).

    Args:
        timeouts: connect and read timeouts of every request (a call may set a total instead).
        headers: sent with every request (e.g. `Authorization: Bearer TOKEN`).
        max_connections: connections in all (at least the requests you run at once).
    """

    def __init__(self, timeouts: Timeouts = Timeouts(), headers: Mapping[str, str] | None = None,
                 max_connections: int = 1024):  # fmt: skip
        self.timeouts = timeouts
        self.headers = dict(headers or {})
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session (made on first use, in the running loop; again after `aclose`)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0),
                timeout=self.timeouts.client_timeout(), headers=self.headers, cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def send(self, method: str, url: str, data: bytes | None = None, headers: Mapping[str, str] | None = None,
                   total_s: float | None = None) -> Response:  # fmt: skip
        """One attempt: the answer whatever its status. `total_s` bounds the whole call instead of the session's
        timeouts. Raises a `TRANSPORT_ERRORS` exception when no answer came."""
        timeout = aiohttp.ClientTimeout(total=total_s) if total_s is not None else None
        kwargs: dict[str, Any] = {"data": data, "headers": headers}
        if timeout is not None:
            kwargs["timeout"] = timeout
        async with self.session().request(method, url, **kwargs) as response:
            return Response(response.status, response.headers, await response.read())

    async def request(self, method: str, url: str, *, json_body: Any = None, data: bytes | None = None,
                      headers: Mapping[str, str] | None = None, idempotent: bool, retry: RetryPolicy = NO_RETRY,
                      retry_on: Callable[[Response], bool] | None = None, total_s: float | None = None) -> Response:  # fmt: skip
        """Send `json_body` (as JSON, `dumps`) or `data`, retried per `retry`, and return the final answer (any
        status the caller did not name retryable).

        Sent again: after a transport error when `idempotent` (any `TRANSPORT_ERRORS`), otherwise only after one
        proving the request never left (`NOT_SENT`); and after an answer for which `retry_on` is true (the caller's
        word that the server did not process it, e.g. a 503 of back-pressure; for an idempotent call, any 5xx).

        The first attempt runs outside tenacity (its per-call machinery cost ~50 us of the ~0.5 ms a request costs
        the client); the retries run under tenacity's `AsyncRetrying`.

        Raises:
            RetriesExhausted: the retries ran out (`.last`: the last error, or a `RetryableAnswer`).
            a `TRANSPORT_ERRORS` exception: a failure that may not be retried (a non-idempotent call that may have
                reached the server).
        """
        if json_body is not None:
            data = dumps(json_body)
            headers = {**JSON_HEADERS, **(headers or {})}
        retryable = ((*TRANSPORT_ERRORS,) if idempotent else NOT_SENT) + (RetryableAnswer,)

        async def attempt() -> Response:
            resp = await self.send(method, url, data, headers, total_s)
            if retry_on is not None and retry_on(resp):
                raise RetryableAnswer(resp)
            return resp

        t0 = time.monotonic()
        try:
            return await attempt()
        except retryable as e:
            first = e
        wait = retry.wait_s(1, first)
        if retry.max_retries == 0 or (retry.deadline_s is not None and time.monotonic() - t0 + wait > retry.deadline_s):
            raise RetriesExhausted(method, url, 1, first) from first
        await _sleep(wait)
        stop = stop_after_attempt(retry.max_retries) if retry.max_retries is not None else stop_never
        if retry.deadline_s is not None:
            stop = stop | stop_before_delay(max(retry.deadline_s - (time.monotonic() - t0), 0.0))
        retrying = AsyncRetrying(
            stop=stop, sleep=_sleep, retry=retry_if_exception_type(retryable),
            wait=lambda s: retry.wait_s(s.attempt_number + 1, s.outcome.exception() if s.outcome else None),
        )  # fmt: skip
        try:
            async for tried in retrying:
                with tried:
                    return await attempt()
        except RetryError as e:
            last = e.last_attempt.exception() or first
            raise RetriesExhausted(method, url, 1 + e.last_attempt.attempt_number, last) from last
        raise AssertionError("unreachable: tenacity either returned, raised or gave up")

    async def aclose(self) -> None:
        """Close the connection pool (a later request opens a new one)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def get_json(url: str, timeout_s: float = 30.0) -> tuple[Response, Any]:
    """One `GET url` on a session of its own (for one-off calls): the answer and its JSON (None when the answer is
    not JSON). Raises a `TRANSPORT_ERRORS` exception when nothing answers within `timeout_s`."""
    async with HttpClient(Timeouts(connect_s=timeout_s, read_s=timeout_s), max_connections=1) as http:
        resp = await http.send("GET", url, total_s=timeout_s)
    try:
        return resp, resp.json()
    except ValueError:
        return resp, None
