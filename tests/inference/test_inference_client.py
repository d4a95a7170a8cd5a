"""InferenceClient against a fake transport (no vLLM): routing, retries, parsing, errors."""

from __future__ import annotations

import json

import httpx
import pytest

from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
from prime_rl.inference.client import InferenceClient, InferenceError, NoReplicaLeft


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


class Fake:
    def __init__(self, script=None):
        self.calls: list[tuple[str, str, dict | None]] = []
        self.script = list(script or [])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.url.host + ":" + str(request.url.port), request.url.path, body))
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            return item
        if request.url.path == "/inference/v1/generate":
            n = body["sampling_params"]["max_tokens"]
            return httpx.Response(200, json=_gen_response(list(range(65, 65 + n)), [-1.5] * n, version="7"))
        return httpx.Response(200, json={"ok": True})


def make(fake, urls=("http://a:1", "http://b:2"), retries=3):
    cfg = ClientConfig(base_url=list(urls), max_retries=retries)
    return InferenceClient(cfg, transport=httpx.MockTransport(fake))


async def test_generate_parses_and_sends_sampling():
    fake = Fake()
    c = make(fake)
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


async def test_round_robin_and_sticky():
    fake = Fake()
    c = make(fake, urls=("http://a:1", "http://b:2", "http://c:3"))
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


async def test_retries_5xx_and_transport_then_succeeds(monkeypatch):
    monkeypatch.setattr("prime_rl.inference.client.asyncio.sleep", _no_sleep)
    ok = httpx.Response(200, json=_gen_response([70], [-0.25]))
    fake = Fake([httpx.Response(503, text="busy"), httpx.ConnectError("refused"), ok])
    c = make(fake, urls=("http://a:1",), retries=2)
    r = await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert r.completion_ids == [70] and r.logprobs == [-0.25] and r.policy_version == 0
    assert len(fake.calls) == 3
    await c.aclose()


async def _no_sleep(_s):
    return None


async def test_retries_are_bounded_and_4xx_is_not_retried(monkeypatch):
    monkeypatch.setattr("prime_rl.inference.client.asyncio.sleep", _no_sleep)
    fake = Fake([httpx.Response(500, text="boom")] * 3)
    c = make(fake, urls=("http://a:1",), retries=2)
    with pytest.raises(InferenceError, match="after 3 attempts"):
        await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert [p for _, p, _ in fake.calls] == ["/inference/v1/generate"] * 3 + ["/health"]  # alive: not marked down
    assert c.pool.up() == ["http://a:1"]
    fake = Fake([httpx.Response(400, text="bad prompt")])
    c = make(fake, urls=("http://a:1",), retries=5)
    with pytest.raises(InferenceError, match="400: bad prompt"):
        await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert len(fake.calls) == 1
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        await c.generate([], SamplingConfig())
    await c.aclose()


async def test_retry_waits_double_from_half_a_second_up_to_8(monkeypatch):
    """The documented backoff: 0.5, 1, 2, 4, 8, 8 s between 7 attempts (6 retries), then InferenceError."""
    waits = []

    async def record(s):
        waits.append(s)

    monkeypatch.setattr("prime_rl.inference.client.asyncio.sleep", record)
    fake = Fake([httpx.ConnectError("refused")] * 7)
    c = make(fake, urls=("http://a:1",), retries=6)
    with pytest.raises(InferenceError, match=r"after 7 attempts \(client.max_retries\): ConnectError: refused"):
        await c.generate([1], SamplingConfig(max_completion_tokens=1))
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert [p for _, p, _ in fake.calls] == ["/inference/v1/generate"] * 7 + ["/health"]  # alive: not marked down
    await c.aclose()


async def test_misaligned_logprobs_rejected():
    bad = _gen_response([70, 71], [-1.0, -2.0])
    bad["choices"][0]["logprobs"]["content"].pop()
    c = make(Fake([httpx.Response(200, json=bad)]), urls=("http://a:1",))
    with pytest.raises(InferenceError, match="line up"):
        await c.generate([1], SamplingConfig(max_completion_tokens=2))
    await c.aclose()


async def test_policy_version_is_oldest_span_and_update_weights_all_servers():
    resp = _gen_response([70, 71], [-1.0, -2.0])
    resp["choices"][0]["weight_versions"] = [
        {"version": "4", "start": 0, "end": 1},
        {"version": "5", "start": 1, "end": 2},
    ]
    fake = Fake([httpx.Response(200, json=resp)])
    c = make(fake)
    r = await c.generate([1], SamplingConfig(max_completion_tokens=2))
    assert r.policy_version == 4
    fake.calls.clear()
    await c.update_weights("/w/step_3", 3)
    assert sorted((h, p, b["version"], b["path"]) for h, p, b in fake.calls) == [
        ("a:1", "/update_weights", 3, "/w/step_3"),
        ("b:2", "/update_weights", 3, "/w/step_3"),
    ]
    fake.script = [httpx.Response(200, json={}), httpx.Response(400, text="no safetensors")]
    with pytest.raises(InferenceError, match="no safetensors"):
        await c.update_weights("/w/step_4", 4)
    await c.aclose()


async def test_wait_healthy_times_out_naming_server():
    fake = Fake([httpx.Response(503)] * 100)
    c = make(fake, urls=("http://a:1",))
    with pytest.raises(TimeoutError, match="http://a:1"):
        await c.wait_healthy(0.2)
    await c.aclose()


class DeadHost(Fake):
    """`Fake`, except that every request to `dead` hosts (health included) is refused."""

    def __init__(self, dead: set[str]):
        super().__init__()
        self.dead = dead

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host + ":" + str(request.url.port)
        if host in self.dead:
            self.calls.append((host, request.url.path, None))
            raise httpx.ConnectError("connection refused")
        return super().__call__(request)


async def test_a_dead_replica_is_marked_down_and_its_requests_go_elsewhere(monkeypatch):
    monkeypatch.setattr("prime_rl.inference.client.asyncio.sleep", _no_sleep)
    fake = DeadHost({"a:1"})
    c = make(fake, retries=1)
    s = SamplingConfig(max_completion_tokens=1)
    r = await c.generate([1], s, rollout_id="r1")  # picked a:1 first (idle pool), retried on b:2
    assert r.completion_ids == [65] and c.pool.up() == ["http://b:2"]
    assert [(h, p) for h, p, _ in fake.calls] == [("a:1", "/inference/v1/generate")] * 2 + [
        ("a:1", "/health"), ("b:2", "/inference/v1/generate")]
    fake.calls.clear()
    for rid in ("r1", "r2", None):
        await c.generate([1], s, rollout_id=rid)
    assert {h for h, _, _ in fake.calls} == {"b:2"}
    # weight updates: only the replicas that are up, and the version is recorded once they all have it
    fake.calls.clear()
    await c.update_weights("/w/step_1", 1)
    assert [(h, p) for h, p, _ in fake.calls] == [("b:2", "/update_weights")]
    assert c._known_version == {"http://a:1": 0, "http://b:2": 1}
    fake.dead.add("b:2")
    with pytest.raises(NoReplicaLeft, match="every inference replica is down"):
        await c.generate([1], s)
    with pytest.raises(NoReplicaLeft):
        c.check_alive()
    await c.aclose()


async def test_update_weights_marks_a_dead_replica_down_but_fails_on_a_live_one(monkeypatch):
    monkeypatch.setattr("prime_rl.inference.client.asyncio.sleep", _no_sleep)
    fake = DeadHost({"b:2"})
    c = make(fake, retries=1)
    await c.update_weights("/w/step_2", 2)  # b:2 unreachable and not healthy: marked down, a:1 has version 2
    assert c.pool.up() == ["http://a:1"] and c._known_version["http://a:1"] == 2
    fake.script = [httpx.Response(500, text="load failed")] * 2  # a:1 fails the load but is alive: an error
    with pytest.raises(InferenceError, match="update_weights\\(/w/step_3, version=3\\) failed on: http://a:1"):
        await c.update_weights("/w/step_3", 3)
    assert c._known_version["http://a:1"] == 2
    await c.aclose()
