"""prime-rl's HTTP layer (`prime_rl.http`) against real local servers (aiohttp, real sockets): a call that is not
idempotent is never re-sent once it may have reached the server (read timeout, dropped connection), only after
errors that prove it never left or answers the caller names retryable; idempotent calls are retried; the wait
schedule, `Retry-After` floor, retry count and deadline; JSON that reads and writes what the `json` module would."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from prime_rl.http import (
    HttpClient,
    RetriesExhausted,
    RetryableAnswer,
    RetryPolicy,
    Timeouts,
    dumps,
    get_json,
    is_loopback,
    loads,
)
from prime_rl.ports import free_port


class Server:
    """One local server; `hits` counts requests per path. `/slow` answers after 1 s, `/drop` closes the connection
    without answering, `/busy` answers 503 with `Retry-After: 3` the first `busy` times, then 200."""

    def __init__(self, busy: int = 0):
        self.hits: dict[str, int] = {}
        self.busy = busy
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Server:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        if request.path == "/slow":
            await asyncio.sleep(1.0)
        if request.path == "/drop":
            request.transport.close()
            return web.Response()
        if request.path == "/busy" and self.hits["/busy"] <= self.busy:
            return web.Response(status=503, text="busy", headers={"Retry-After": "3"})
        return web.json_response({"ok": True, "n": self.hits[request.path]})


@pytest.fixture
def waits(monkeypatch):
    """The retry waits requested (no real sleeping)."""
    seen: list[float] = []

    async def record(seconds):
        seen.append(seconds)

    monkeypatch.setattr("prime_rl.http._sleep", record)
    return seen


async def test_a_call_that_is_not_idempotent_is_not_resent_after_a_read_timeout(waits):
    async with Server() as srv, HttpClient(Timeouts(connect_s=5, read_s=0.2)) as http:
        with pytest.raises(TimeoutError):
            await http.request("POST", srv.url + "/slow", json_body={"a": 1}, idempotent=False,
                               retry=RetryPolicy(max_retries=3))  # fmt: skip
        assert srv.hits == {"/slow": 1} and waits == []
        with pytest.raises(RetriesExhausted) as e:  # the same call, idempotent: sent 1 + 3 times
            await http.request("POST", srv.url + "/slow", json_body={"a": 1}, idempotent=True,
                               retry=RetryPolicy(max_retries=3))  # fmt: skip
        assert srv.hits == {"/slow": 5} and e.value.attempts == 4 and isinstance(e.value.last, TimeoutError)
        assert waits == [0.5, 1.0, 2.0]


async def test_a_dropped_connection_is_retried_only_when_idempotent(waits):
    async with Server() as srv, HttpClient() as http:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await http.request("POST", srv.url + "/drop", data=b"x", idempotent=False, retry=RetryPolicy(max_retries=2))
        assert srv.hits == {"/drop": 1}
        with pytest.raises(RetriesExhausted, match=r"POST .*/drop failed after 3 attempts: ServerDisconnectedError"):
            await http.request("POST", srv.url + "/drop", data=b"x", idempotent=True, retry=RetryPolicy(max_retries=2))
        assert srv.hits == {"/drop": 4}


async def test_what_never_left_is_retried_even_when_not_idempotent(waits):
    url = f"http://127.0.0.1:{free_port()}/seed"  # nothing listens: connection refused
    async with HttpClient(Timeouts(connect_s=2, read_s=2)) as http:
        with pytest.raises(RetriesExhausted) as e:
            await http.request("POST", url, data=b"x", idempotent=False, retry=RetryPolicy(max_retries=2))
    assert e.value.attempts == 3 and isinstance(e.value.last, aiohttp.ClientConnectorError)


async def test_answers_named_retryable_honour_retry_after_then_the_answer_comes_back(waits):
    def busy(resp):
        return resp.status == 503

    async with Server(busy=2) as srv, HttpClient() as http:
        resp = await http.request("POST", srv.url + "/busy", json_body={}, idempotent=False,
                                  retry=RetryPolicy(max_retries=5), retry_on=busy)  # fmt: skip
        assert resp.status == 200 and resp.json() == {"ok": True, "n": 3} and waits == [3.0, 3.0]
        waits.clear()
        srv.hits.clear()
        srv.busy = 10
        with pytest.raises(RetriesExhausted) as e:
            await http.request("POST", srv.url + "/busy", json_body={}, idempotent=False,
                               retry=RetryPolicy(max_retries=1), retry_on=busy)  # fmt: skip
        assert isinstance(e.value.last, RetryableAnswer) and e.value.last.response.status == 503
        assert "answered 503: busy" in str(e.value) and srv.hits == {"/busy": 2}
        resp = await http.request("POST", srv.url + "/busy", json_body={}, idempotent=False)  # no retry_on: as is
        assert resp.status == 503 and resp.retry_after_s == 3.0


async def test_a_deadline_stops_retries_that_would_start_too_late():
    async with Server(busy=100) as srv, HttpClient() as http:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(RetriesExhausted):
            await http.request("GET", srv.url + "/fast", idempotent=True, retry_on=lambda r: True,
                               retry=RetryPolicy(deadline_s=0.3, first_wait_s=0.05, max_wait_s=0.05))  # fmt: skip
        assert loop.time() - t0 < 2.0 and 2 <= srv.hits["/fast"] <= 8


def test_wait_schedule():
    p = RetryPolicy(max_retries=6)
    assert [p.wait_s(k, None) for k in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    j = RetryPolicy(deadline_s=10, first_wait_s=0.1, max_wait_s=1.0, jitter=True)
    for k in range(1, 8):
        base = min(0.1 * 2 ** (k - 1), 1.0)
        assert 0.5 * base <= j.wait_s(k, None) < 1.5 * base
    with pytest.raises(ValueError, match="max_retries or deadline_s"):
        RetryPolicy()


def test_json_reads_and_writes_what_the_json_module_would():
    for obj in ({"x": float("nan")}, {1: "k"}, {"big": 2**70}, {"s": "\ud800"}, [1e16, -0.0, 1e-300], {"n": None}):
        assert repr(json.loads(dumps(obj))) == repr(json.loads(json.dumps(obj))), obj
    for raw in (b'{"r": NaN}', b'{"big": 123456789012345678901234567890}', b'[-12345678901234567890123]',
                b'[-0.00012345678901234567, 1.2345678901234567e-05]', b'{"id": "12345678901234567890123"}'):  # fmt: skip
        assert repr(loads(raw)) == repr(json.loads(raw)), raw
    with pytest.raises(ValueError):
        loads(b"not json")


def test_is_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "", "10.1.2.3", "example.org"]))


async def test_get_json():
    async with Server() as srv:
        resp, body = await get_json(srv.url + "/x", timeout_s=5)
    assert resp.status == 200 and body == {"ok": True, "n": 1}
