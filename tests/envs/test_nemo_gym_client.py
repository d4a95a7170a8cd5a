"""The NeMo Gym client's retry rules and the source's reading of verify answers (issue 13 A and D, issue 14).

- A request that may have run (read timeout after a verify was sent) is never re-sent: one answer or a masked
  failure. Only what cannot have run is retried: connect errors, and a 503 without `failure_kind`.
- A verify answer whose reward is missing, null, not a number or not finite masks the rollout (never 0.0).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request, Response
from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer

from prime_rl.config.orchestrator import NemoGymTasksetConfig, RendererConfig, SamplingConfig
from prime_rl.envs.base import Environment, Episode, Task, VerifyResult
from prime_rl.envs.nemo_gym.client import NemoGymClient, NemoGymError
from prime_rl.envs.nemo_gym.rows import task_to_row
from prime_rl.envs.nemo_gym.server import ServerState, serve_in_thread
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.sources.nemo_gym import NemoGymSource
from prime_rl.ports import free_port


class SlowEpisode(Episode):
    def __init__(self, task: Task, calls: list[str], verify_s: float):
        self.task, self.calls, self.verify_s = task, calls, verify_s

    def call_tool(self, name, arguments):
        self.calls.append("tool")
        return "ok"

    def verify(self, final_response=None):
        self.calls.append("verify")
        time.sleep(self.verify_s)
        return VerifyResult(reward=1.0)


class SlowEnv(Environment):
    """One task; verify takes `verify_s` seconds and is counted."""

    name = "slow"

    def __init__(self, verify_s: float = 0.0):
        self.calls: list[str] = []
        self.verify_s = verify_s

    def tasks(self, split):
        return [Task("slow-0", split, 0, [{"role": "user", "content": "go"}], info={"x": 1})]

    def episode(self, task):
        return SlowEpisode(task, self.calls, self.verify_s)


async def test_verify_read_timeout_is_not_resent():
    env = SlowEnv(verify_s=1.0)
    row = task_to_row(env.tasks("train")[0])
    with serve_in_thread(ServerState(env=env)) as url:
        async with NemoGymClient(url, request_timeout=0.3, retry_deadline_s=10) as c:
            s = await c.seed(row)
            with pytest.raises(NemoGymError) as e:
                await c.verify(s, row, "x")
            assert e.value.kind == "transport_timeout"
            await asyncio.sleep(1.5)  # let the server finish the one verify it got
    assert env.calls.count("verify") == 1, env.calls  # the timed-out POST ran once and was never repeated


async def test_connect_errors_are_retried_until_the_server_is_up():
    env = SlowEnv()
    row = task_to_row(env.tasks("train")[0])
    port = free_port()
    holder: dict = {}

    def start_late() -> None:
        time.sleep(0.6)
        holder["cm"] = serve_in_thread(ServerState(env=env), port=port)
        holder["cm"].__enter__()

    t = threading.Thread(target=start_late)
    t.start()
    try:
        async with NemoGymClient(f"http://127.0.0.1:{port}", retry_deadline_s=15) as c:
            s = await c.seed(row)  # connection refused at first: never sent, so retried
            assert (await c.verify(s, row, "x"))["reward"] == 1.0
            await c.close(s)
    finally:
        t.join()
        holder["cm"].__exit__(None, None, None)
    assert env.calls == ["verify"]


async def test_backpressure_503_is_retried_and_gives_up_with_unavailable():
    env = SlowEnv()
    row = task_to_row(env.tasks("train")[0])
    with serve_in_thread(ServerState(env=env, max_concurrent=1, at_capacity="reject")) as url:
        async with NemoGymClient(url, retry_deadline_s=0.4) as c:
            s = await c.seed(row)
            with pytest.raises(NemoGymError) as e:
                await c.seed(row)
            assert e.value.kind == "unavailable" and "503" in str(e.value)
            await c.close(s)
            s2 = await c.seed(row)  # the slot is free again
            await c.close(s2)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _stub_server(verify_bodies: list[bytes]) -> tuple[uvicorn.Server, threading.Thread, str]:
    """A resources server whose n-th verify answers `verify_bodies[n]` (raw JSON, so NaN can be sent)."""
    app = FastAPI()
    n = {"verify": 0}

    @app.post("/seed_session")
    async def seed() -> Response:
        r = Response(b"{}", media_type="application/json")
        r.set_cookie("Stub___x", "s1")
        return r

    @app.post("/verify")
    async def verify(request: Request) -> Response:
        body = verify_bodies[n["verify"] % len(verify_bodies)]
        n["verify"] += 1
        return Response(body, media_type="application/json")

    @app.post("/close_session")
    async def close(request: Request) -> dict:
        return {"resources_session_id": (await request.json())["resources_session_id"]}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.01)
    return server, t, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("body", "masked"),
    [(b'{"mask_sample": false}', True), (b'{"reward": null}', True), (b'{"reward": "1"}', True),
     (b'{"reward": NaN}', True), (b'{"reward": Infinity}', True), (b'{"reward": true}', True),
     (b'{"reward": 0.5, "mask_sample": false}', False), (b'{"reward": 0.5, "mask_sample": true}', True)],
)  # fmt: skip
async def test_missing_or_non_finite_reward_masks_the_rollout(body, masked, tmp_path, tok):
    env = SlowEnv()
    (tmp_path / "train.jsonl").write_text(json.dumps(task_to_row(env.tasks("train")[0])) + "\n")
    server, t, url = _stub_server([body])
    src = NemoGymSource("stub", NemoGymTasksetConfig(dataset=tmp_path / "train.jsonl", task={"resources_url": url}))
    src.max_turns = 2
    try:
        r = await run_rollout(src.tasks("train")[0], src, ScriptedClient(tok, lambda p, k: "answer"),
                              make_renderer(tok, RendererConfig()), SamplingConfig(), AgentLimits(1024, 32))  # fmt: skip
    finally:
        await src.aclose()
        server.should_exit = True
        t.join(5)
    assert r.masked is masked, (body, r.error)
    if masked and b"mask_sample\": true" not in body:
        assert "reward" in r.error and "slow-0" in r.error, r.error  # names the field and the task
    if not masked:
        assert r.reward == 0.5


def test_request_and_answer_json_carry_the_same_values_as_the_json_module():
    """The client's JSON (orjson where it gives the same value, `json` otherwise) sends and reads what `json` would:
    NaN/Infinity stay literals (orjson would send null), non-string keys, huge ints and lone surrogates go through
    `json`, types JSON has no form for still fail; answers with NaN or huge ints parse as `json` parses them."""
    import math
    from dataclasses import dataclass

    from prime_rl.envs.nemo_gym.client import _parse_set_cookie
    from prime_rl.http import dumps as _dumps
    from prime_rl.http import loads as _loads

    @dataclass
    class D:
        x: int = 1

    cases = [{"a": [1, 2.5, "é", True, {"b": "c"}]}, {"n": None}, {"x": float("nan")}, {"x": float("-inf")},
             {1: "int key"}, {"big": 2**70}, {"s": "\ud800"}, {"t": (1, 2)}, "plain", [1e16, -0.0, 1e-300]]  # fmt: skip
    for obj in cases:
        sent = _dumps(obj)
        want = json.dumps(obj, separators=(",", ":"))
        got, ref = json.loads(sent), json.loads(want)
        assert repr(got) == repr(ref), obj  # repr: NaN compares unequal to itself
    for bad in ({"d": D()}, {"s": {1, 2}}):
        with pytest.raises(TypeError):
            _dumps(bad)
        with pytest.raises(TypeError):
            json.dumps(bad)
    for raw in (b'{"r": NaN, "i": -Infinity}', b'{"big": 123456789012345678901234567890}', b'[1, 2.5, "\\u00e9"]'):
        assert repr(_loads(raw)) == repr(json.loads(raw))
    assert math.isnan(_loads(b'{"r": NaN}')["r"])
    with pytest.raises(ValueError):
        _loads(b"not json")
    header = "NeMoGym___s=abc.def; HttpOnly; Path=/; SameSite=lax"
    assert _parse_set_cookie(header) == _parse_set_cookie(header) == (("NeMoGym___s", "abc.def"),)
    assert _parse_set_cookie('bad="') == ()
