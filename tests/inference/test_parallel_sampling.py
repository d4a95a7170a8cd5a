"""`client.parallel_sampling`: the generate calls of one event-loop iteration with the same prompt and settings go
out as one request with n samples (prime_rl.inference.parallel_sampling).

Unit tests against scripted aiohttp servers (real sockets) that answer a request's n choices with distinct tokens;
the last test runs against the session's real vLLM server on the tiny model: choice i of an n-request is the sample
a plain request with seed + i gives (tokens and logprobs), which is what the module docstring claims."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from prime_rl.config.orchestrator import ClientConfig, EvalCommandConfig, SamplingConfig
from prime_rl.inference.client import InferenceClient, InferenceError
from prime_rl.ports import free_port


def _choice(index: int, ids: list[int]) -> dict:
    return {
        "index": index,
        "finish_reason": "length",
        "token_ids": ids,
        "weight_versions": [{"version": "3", "start": 0, "end": len(ids)}],
        "logprobs": {"content": [{"token_id": t, "logprob": -0.5 - index} for t in ids]},
    }


class NFake:
    """Servers that answer generate with `n` choices: choice i is [100 + i, seed % 1000] (so a test can tell which
    choice and which seed a caller got), listed in reverse index order (the client must sort them). `calls` records
    (host, body); `status` answers every request with that status instead."""

    def __init__(self, status: int = 200):
        self.calls: list[tuple[str, dict]] = []
        self.status = status
        self.probe = None  # called in the handler (same event loop as the client): what it returns is in `seen`
        self.seen: list = []
        self._runners: list[web.AppRunner] = []

    async def start(self, hosts: list[str]) -> list[str]:
        urls = []
        for host in hosts:
            port = free_port()
            app = web.Application()
            app.router.add_post("/inference/v1/generate", self._handler(host))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            self._runners.append(runner)
            urls.append(f"http://127.0.0.1:{port}")
        return urls

    def _handler(self, host: str):
        async def handle(request: web.Request) -> web.Response:
            body = json.loads(await request.read())
            self.calls.append((host, body))
            if self.probe is not None:
                self.seen.append(self.probe())
            if self.status != 200:
                return web.json_response({"error": "refused"}, status=self.status)
            sp = body["sampling_params"]
            n, seed = sp.get("n", 1), sp.get("seed", 0)
            choices = [_choice(i, [100 + i, seed % 1000]) for i in range(n)]
            return web.json_response({"choices": choices[::-1]})

        return handle

    async def close(self) -> None:
        for r in self._runners:
            await r.cleanup()


@pytest.fixture
async def fake_client():
    made: list[tuple[NFake, InferenceClient]] = []

    async def make(hosts=("a:1",), status=200, parallel=True):
        fake = NFake(status)
        urls = await fake.start(list(hosts))
        client = InferenceClient(ClientConfig(base_url=urls, max_retries=0, parallel_sampling=parallel))
        made.append((fake, client))
        return fake, client

    yield make
    for fake, client in made:
        await client.aclose()
        await fake.close()


async def test_a_group_of_calls_is_one_request_with_n(fake_client):
    fake, c = await fake_client()
    s = SamplingConfig(max_completion_tokens=2)
    prompts = [[1, 2, 3] for _ in range(4)]  # equal lists, distinct objects (the agent loop copies its prompt)
    ids = ["r2", "r0", "r3", "r1"]  # arrival order is not rollout-id order
    seeds = {"r0": 40, "r1": 41, "r2": 42, "r3": 43}
    fake.probe = lambda: sum(r.outstanding for r in c.pool.replicas.values())  # in flight while the server answers
    results = await asyncio.gather(*(
        c.generate(p, s.model_copy(update={"seed": seeds[rid]}), rollout_id=rid, stop_token_ids=[9])
        for p, rid in zip(prompts, ids, strict=True)
    ))  # fmt: skip
    assert len(fake.calls) == 1
    sp = fake.calls[0][1]["sampling_params"]
    assert (sp["n"], sp["seed"], sp["stop_token_ids"], sp["max_tokens"]) == (4, 40, [9], 2)  # the first id's seed
    # choice i goes to the i-th call in rollout-id order, whatever order the choices came in
    got = {rid: r.completion_ids for rid, r in zip(ids, results, strict=True)}
    assert got == {"r0": [100, 40], "r1": [101, 40], "r2": [102, 40], "r3": [103, 40]}
    assert all(r.prompt_ids is p for r, p in zip(results, prompts, strict=True))  # each caller's own list back
    assert {rid: r.logprobs for rid, r in zip(ids, results, strict=True)}["r2"] == [-2.5, -2.5]
    assert {r.policy_version for r in results} == {3}
    assert (c._parallel.requests, c._parallel.samples) == (1, 4)
    assert fake.seen == [4]  # the replica pool counts the request as its 4 sequences (load balancing)


async def test_more_than_max_n_identical_calls_are_split(fake_client):
    from prime_rl.inference.parallel_sampling import MAX_N

    fake, c = await fake_client()
    s = SamplingConfig(max_completion_tokens=2)
    ids = [f"r{i:03d}" for i in range(MAX_N + 6)]
    out = await asyncio.gather(*(c.generate([4], s.model_copy(update={"seed": i}), rollout_id=r) for i, r in enumerate(ids)))
    assert sorted(b["sampling_params"]["n"] for _, b in fake.calls) == [6, MAX_N]
    assert sorted(b["sampling_params"]["seed"] for _, b in fake.calls) == [0, MAX_N]  # each part: its first id's seed
    assert [r.completion_ids[0] for r in out] == [100 + i for i in range(MAX_N)] + [100 + i for i in range(6)]


async def test_alone_different_or_later_calls_are_plain_requests(fake_client):
    fake, c = await fake_client()
    s = SamplingConfig(max_completion_tokens=2, seed=5)
    r = await c.generate([1, 2], s, rollout_id="x")
    assert "n" not in fake.calls[0][1]["sampling_params"]  # the same body as with parallel_sampling = false
    assert r.completion_ids == [100, 5]
    fake.calls.clear()
    # same iteration, different prompt or settings: separate requests
    await asyncio.gather(
        c.generate([1, 2], s, rollout_id="a"),
        c.generate([1, 3], s, rollout_id="b"),
        c.generate([1, 2], s.model_copy(update={"temperature": 0.5}), rollout_id="c"),
        c.generate([1, 2], s, rollout_id="d", max_tokens=1),
    )
    assert len(fake.calls) == 4 and all("n" not in b["sampling_params"] for _, b in fake.calls)
    fake.calls.clear()

    async def later(rid: str, delay_iterations: int):
        for _ in range(delay_iterations):
            await asyncio.sleep(0)
        return await c.generate([1, 2], s, rollout_id=rid)

    await asyncio.gather(later("p", 0), later("q", 0), later("r", 3))  # r comes iterations later: not held back
    assert sorted(b["sampling_params"].get("n", 1) for _, b in fake.calls) == [1, 2]


async def test_same_samples_as_before_without_the_setting(fake_client):
    """parallel_sampling = false: one request per call, each with its own seed (the old path, untouched)."""
    fake, c = await fake_client(parallel=False)
    s = SamplingConfig(max_completion_tokens=2)
    await asyncio.gather(*(c.generate([7], s.model_copy(update={"seed": i}), rollout_id=str(i)) for i in range(3)))
    assert sorted(b["sampling_params"]["seed"] for _, b in fake.calls) == [0, 1, 2]
    assert all("n" not in b["sampling_params"] for _, b in fake.calls)
    assert c._parallel is None


async def test_an_error_reaches_every_caller(fake_client):
    fake, c = await fake_client(status=400)
    s = SamplingConfig(max_completion_tokens=2)
    out = await asyncio.gather(*(c.generate([1], s, rollout_id=str(i)) for i in range(3)), return_exceptions=True)
    assert len(fake.calls) == 1
    assert all(isinstance(e, InferenceError) and "answered 400" in str(e) for e in out), out


async def test_a_cancelled_caller_is_left_out_and_the_others_get_theirs(fake_client):
    fake, c = await fake_client()
    s = SamplingConfig(max_completion_tokens=2, seed=0)
    tasks = [asyncio.create_task(c.generate([1], s, rollout_id=str(i))) for i in range(3)]
    await asyncio.sleep(0)  # every call queued, the flush not yet run
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert fake.calls[0][1]["sampling_params"]["n"] == 2
    assert [r.completion_ids[0] for r in (done[0], done[2])] == [100, 101]


async def test_later_turns_of_every_member_go_to_the_replica_that_answered(fake_client):
    fake, c = await fake_client(hosts=("a:1", "b:2"))
    s = SamplingConfig(max_completion_tokens=2)
    await c.generate([5], s, rollout_id="warm")  # a:1 now has a sticky rollout; the pool's next pick is b:2
    await asyncio.gather(*(c.generate([1], s, rollout_id=f"g{i}") for i in range(4)))
    group_host = fake.calls[-1][0]
    fake.calls.clear()
    for i in range(4):
        await c.generate([1, 100 + i, 9], s, rollout_id=f"g{i}")  # a later turn: its own prompt, its own request
    assert [h for h, _ in fake.calls] == [group_host] * 4


def test_the_transformers_backend_refuses_the_setting():
    """parallel_sampling is a setting of the server backend: beside backend.type = transformers the config is
    refused when read, in the flat form ([client]) and in [backend], naming the field and the fix."""
    from prime_rl.config.loader import ConfigError, parse_config

    with pytest.raises(ValueError, match=r"client.parallel_sampling: a setting of backend.type = 'server', but "
                                         r"backend.type is 'transformers'; drop \[client\]"):
        EvalCommandConfig(backend="transformers", client={"parallel_sampling": True})
    with pytest.raises(ConfigError, match=r"backend.parallel_sampling .*not a setting of backend.type = 'transformers'"
                                          r".*drop --backend.parallel-sampling, or choose type 'server'"):
        parse_config(EvalCommandConfig, ["--backend", "transformers", "--backend.parallel-sampling"])


@pytest.mark.slow
async def test_choice_i_is_the_sample_of_seed_plus_i_on_real_vllm(shared_vllm):
    """Real vLLM (tiny model, T = 1): the 6 choices of one n = 6 request with seed 1000 equal 6 plain requests with
    seeds 1000..1005, token for token, with the same logprobs (the behaviour policy the trainer corrects against)."""
    from prime_rl.models.tiny import cached_tiny_model

    server = shared_vllm.get(cached_tiny_model())
    prompt = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]
    s = SamplingConfig(temperature=1.0, max_completion_tokens=12)
    ps = InferenceClient(ClientConfig(base_url=[server.base_url], parallel_sampling=True))
    plain = InferenceClient(ClientConfig(base_url=[server.base_url]))
    try:
        seeds = [1000 + i for i in range(6)]
        group = await asyncio.gather(*(
            ps.generate(list(prompt), s.model_copy(update={"seed": sd}), rollout_id=f"r{i}") for i, sd in enumerate(seeds)
        ))  # fmt: skip
        assert ps._parallel.requests == 1
        alone = [await plain.generate(list(prompt), s.model_copy(update={"seed": sd})) for sd in seeds]
        assert len({tuple(g.completion_ids) for g in group}) > 1  # distinct samples, not one repeated
        for g, a in zip(group, alone, strict=True):
            assert g.completion_ids == a.completion_ids
            assert g.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    finally:
        await ps.aclose()
        await plain.aclose()
