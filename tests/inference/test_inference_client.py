"""InferenceClient against scripted local HTTP servers (aiohttp, real sockets; no vLLM): routing, retries,
parsing, errors. Each logical host ("a:1", "b:2", ...) is one server on a free port; a dead host is a port nothing
listens on (connection refused)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from aiohttp import web

from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
from prime_rl.inference.client import InferenceClient, InferenceError, NoReplicaLeft
from prime_rl.ports import free_port


def _gen_response(ids, logprobs, version="default", finish="length"):
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "token_ids": ids,
                "weight_versions": [{"version": version, "start": 0, "end": len(ids)}] if ids else [],
                "logprobs": {
                    "content": [
                        {"token_id": t, "logprob": lp, "top_logprobs": [{"token_id": t, "logprob": lp}]}
                        for t, lp in zip(ids, logprobs, strict=True)
                    ]
                },
            }
        ]
    }


@dataclass
class Reply:
    """A scripted answer: `status` with a JSON body (`json`) or a text body."""

    status: int = 200
    json: object = None
    text: str = ""


DROP = object()  # scripted: close the connection without answering (a transport error for the client)


class Fake:
    """Scripted servers: `calls` records (host, path, body) of every request a server received, in arrival order;
    `script` items are answered first (a `Reply`, or `DROP`), then generate requests get `max_tokens` tokens and
    others {"ok": true}. Hosts in `dead` get no server: their port refuses connections (nothing is recorded)."""

    def __init__(self, script=None, dead=()):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.script = list(script or [])
        self.dead = set(dead)
        self.urls: dict[str, str] = {}
        self.peers: set = set()  # client (address, port) pairs seen: one per connection
        self._runners: dict[str, web.AppRunner] = {}

    async def start(self, hosts) -> list[str]:
        for host in hosts:
            port = free_port()
            self.urls[host] = f"http://127.0.0.1:{port}"
            if host in self.dead:
                continue
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handler(host))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self._runners[host] = runner
        return [self.urls[h] for h in hosts]

    def _handler(self, host):
        async def handle(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            body = json.loads(raw) if raw else None
            self.calls.append((host, request.path, body))
            self.peers.add(request.transport.get_extra_info("peername"))
            if self.script:
                item = self.script.pop(0)
                if item is DROP:
                    request.transport.close()
                    return web.Response(status=500)  # never reaches the client: the connection is gone
                if item.json is not None:
                    return web.json_response(item.json, status=item.status)
                return web.Response(status=item.status, text=item.text)
            if request.path == "/inference/v1/generate":
                n = body["sampling_params"]["max_tokens"]
                return web.json_response(_gen_response(list(range(65, 65 + n)), [-1.5] * n, version="7"))
            return web.json_response({"ok": True})

        return handle

    def host(self, url: str) -> str:
        return {u: h for h, u in self.urls.items()}[url]

    async def kill(self, host: str) -> None:
        """Stop `host`'s server: from now on its port refuses connections."""
        self.dead.add(host)
        await self._runners.pop(host).cleanup()

    async def close(self):
        for r in self._runners.values():
            await r.cleanup()


@pytest.fixture
async def servers():
    made: list[Fake] = []

    async def make(fake, hosts=("a:1", "b:2"), retries=3):
        made.append(fake)
        urls = await fake.start(hosts)
        return InferenceClient(ClientConfig(base_url=urls, max_retries=retries))

    yield make
    for f in made:
        await f.close()


async def test_generate_parses_and_sends_sampling(servers):
    fake = Fake()
    c = await servers(fake)
    s = SamplingConfig(temperature=0.7, top_p=0.9, top_k=-1, max_completion_tokens=5, seed=3)
    r = await c.generate([1, 2, 3], s, stop_token_ids=[258])
    assert (r.prompt_ids, r.completion_ids, r.logprobs) == ([1, 2, 3], [65, 66, 67, 68, 69], [-1.5] * 5)
    assert (r.finish_reason, r.policy_version) == ("length", 7)
    body = fake.calls[0][2]
    assert body["token_ids"] == [1, 2, 3]
    sp = body["sampling_params"]
    assert sp == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 5,
        "logprobs": 0,
        "detokenize": False,
        "seed": 3,
        "stop_token_ids": [258],
    }
    r = await c.generate([1], s, max_tokens=2)
    assert len(r.completion_ids) == 2
    await c.aclose()


async def test_round_robin_and_sticky(servers):
    fake = Fake()
    c = await servers(fake, ("a:1", "b:2", "c:3"))
    s = SamplingConfig(max_completion_tokens=1)
    for _ in range(6):
        await c.generate([1], s)
    assert [h for h, _, _ in fake.calls] == ["a:1", "b:2", "c:3", "a:1", "b:2", "c:3"]
    fake.calls.clear()
    for rid in ["x", "y", "x", "x", "y", "z", "x"]:
        await c.generate([1], s, rollout_id=rid)
    hosts = [h for h, _, _ in fake.calls]
    assert hosts[0] == hosts[2] == hosts[3] == hosts[6]
    assert hosts[1] == hosts[4] != hosts[0]
    assert hosts[5] not in (hosts[0], hosts[1])
    await c.aclose()


async def test_retries_5xx_and_transport_then_succeeds(monkeypatch, servers):
    monkeypatch.setattr("prime_rl.http.asyncio.sleep", _no_sleep)
    ok = Reply(json=_gen_response([70], [-0.25]))
    fake = Fake([Reply(503, text="busy"), DROP, ok])
    c = await servers(fake, ("a:1",), retries=2)
    r = await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert r.completion_ids == [70] and r.logprobs == [-0.25] and r.policy_version == 0
    assert len(fake.calls) == 3
    await c.aclose()


async def _no_sleep(_s):
    return None


async def test_retries_are_bounded_and_4xx_is_not_retried(monkeypatch, servers):
    monkeypatch.setattr("prime_rl.http.asyncio.sleep", _no_sleep)
    fake = Fake([Reply(500, text="boom")] * 3)
    c = await servers(fake, ("a:1",), retries=2)
    with pytest.raises(InferenceError, match="after 3 attempts"):
        await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert [p for _, p, _ in fake.calls] == ["/inference/v1/generate"] * 3 + ["/health"]  # alive: not marked down
    assert c.pool.up() == [fake.urls["a:1"]]
    fake = Fake([Reply(400, text="bad prompt")])
    c = await servers(fake, ("a:1",), retries=5)
    with pytest.raises(InferenceError, match="400: bad prompt"):
        await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert len(fake.calls) == 1
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        await c.generate([], SamplingConfig())
    await c.aclose()


async def test_retry_waits_double_from_half_a_second_up_to_8(monkeypatch, servers):
    """The documented backoff: 0.5, 1, 2, 4, 8, 8 s between 7 attempts (6 retries), then InferenceError."""
    waits = []

    async def record(s):
        waits.append(s)

    monkeypatch.setattr("prime_rl.http.asyncio.sleep", record)
    fake = Fake([DROP] * 7)
    c = await servers(fake, ("a:1",), retries=6)
    with pytest.raises(InferenceError, match=r"after 7 attempts \(client.max_retries\): ServerDisconnectedError"):
        await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert [p for _, p, _ in fake.calls] == ["/inference/v1/generate"] * 7 + ["/health"]  # alive: not marked down
    await c.aclose()


async def test_misaligned_logprobs_rejected(servers):
    bad = _gen_response([70, 71], [-1.0, -2.0])
    bad["choices"][0]["logprobs"]["content"].pop()
    c = await servers(Fake([Reply(json=bad)]), ("a:1",))
    with pytest.raises(InferenceError, match="line up"):
        await c.generate([1], SamplingConfig(max_completion_tokens=2))
    await c.aclose()


async def test_policy_version_is_oldest_span_and_update_weights_all_servers(servers):
    resp = _gen_response([70, 71], [-1.0, -2.0])
    resp["choices"][0]["weight_versions"] = [
        {"version": "4", "start": 0, "end": 1},
        {"version": "5", "start": 1, "end": 2},
    ]
    fake = Fake([Reply(json=resp)])
    c = await servers(fake)
    r = await c.generate([1], SamplingConfig(max_completion_tokens=2))
    assert r.policy_version == 4
    fake.calls.clear()
    await c.update_weights("/w/step_3", 3)
    assert sorted((h, p, b["version"], b["path"]) for h, p, b in fake.calls) == [
        ("a:1", "/update_weights", 3, "/w/step_3"),
        ("b:2", "/update_weights", 3, "/w/step_3"),
    ]
    fake.script = [Reply(json={}), Reply(400, text="no safetensors")]
    with pytest.raises(InferenceError, match="no safetensors"):
        await c.update_weights("/w/step_4", 4)
    await c.aclose()


async def test_wait_healthy_times_out_naming_server(servers):
    fake = Fake([Reply(503)] * 100)
    c = await servers(fake, ("a:1",))
    with pytest.raises(TimeoutError, match=fake.urls["a:1"]):
        await c.wait_healthy(0.2)
    await c.aclose()


async def test_a_dead_replica_is_marked_down_and_its_requests_go_elsewhere(monkeypatch, servers):
    monkeypatch.setattr("prime_rl.http.asyncio.sleep", _no_sleep)
    fake = Fake(dead={"a:1"})
    c = await servers(fake, retries=1)
    a, b = fake.urls["a:1"], fake.urls["b:2"]
    s = SamplingConfig(max_completion_tokens=1)
    r = await c.generate([1], s, rollout_id="r1")  # picked a:1 first (idle pool): refused twice, retried on b:2
    assert r.completion_ids == [65] and c.pool.up() == [b]
    assert [(h, p) for h, p, _ in fake.calls] == [("b:2", "/inference/v1/generate")]
    assert c.pool.replicas[a].sent == 1 and c.pool.replicas[a].down is not None
    fake.calls.clear()
    for rid in ("r1", "r2", None):
        await c.generate([1], s, rollout_id=rid)
    assert [h for h, _, _ in fake.calls] == ["b:2"] * 3
    # weight updates: only the replicas that are up, and the version is recorded once they all have it
    fake.calls.clear()
    await c.update_weights("/w/step_1", 1)
    assert [(h, p) for h, p, _ in fake.calls] == [("b:2", "/update_weights")]
    assert c._known_version == {a: 0, b: 1}
    await fake.kill("b:2")
    with pytest.raises(NoReplicaLeft, match="every inference replica is down"):
        await c.generate([1], s)
    with pytest.raises(NoReplicaLeft):
        c.check_alive()
    await c.aclose()


async def test_update_weights_marks_a_dead_replica_down_but_fails_on_a_live_one(monkeypatch, servers):
    monkeypatch.setattr("prime_rl.http.asyncio.sleep", _no_sleep)
    fake = Fake(dead={"b:2"})
    c = await servers(fake, retries=1)
    a = fake.urls["a:1"]
    await c.update_weights("/w/step_2", 2)  # b:2 unreachable and not healthy: marked down, a:1 has version 2
    assert c.pool.up() == [a] and c._known_version[a] == 2
    fake.script = [Reply(500, text="load failed")] * 2  # a:1 fails the load but is alive: an error
    with pytest.raises(InferenceError, match=f"update_weights\\(/w/step_3, version=3\\) failed on: {a}"):
        await c.update_weights("/w/step_3", 3)
    assert c._known_version[a] == 2
    await c.aclose()


async def test_one_pooled_connection_serves_many_requests(servers):
    """Keep-alive: sequential requests of one client reuse one connection (no per-request connection set-up)."""
    fake = Fake()
    c = await servers(fake, ("a:1",))
    s = SamplingConfig(max_completion_tokens=1)
    for _ in range(20):
        await c.generate([1], s)
    assert len(fake.calls) == 20
    assert len(fake.peers) == 1, fake.peers
    await c.aclose()
