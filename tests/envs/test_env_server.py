"""NeMo Gym resources server over real HTTP on 127.0.0.1 (uvicorn in a thread, always shut down)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys

import httpx
import pytest

from prime_rl.envs import load_env
from prime_rl.envs.gridsim.baselines import greedy
from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.nemo_gym.client import NemoGymClient, NemoGymError, Session
from prime_rl.envs.nemo_gym.rows import read_rows, row_to_task, task_to_row, write_server
from prime_rl.envs.nemo_gym.server import COOKIE_PREFIX, ServerState, serve_in_thread

COOKIE = COOKIE_PREFIX + "prime_rl"  # ServerState.name defaults to prime_rl


@pytest.fixture(scope="module", autouse=True)
def fast_thread_switch():
    """Server and client share the GIL here; the default 5 ms switch interval would dominate request latency."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    yield
    sys.setswitchinterval(old)


@pytest.fixture(scope="module")
def env():
    return GridSimEnv()


@pytest.fixture(scope="module")
def rows(env):
    return [task_to_row(t) for t in env.tasks("eval")[:100]]


@pytest.fixture(scope="module")
def url(env):
    with serve_in_thread(ServerState(env=env, max_concurrent=128)) as u:
        yield u


def expected(env, row, schedule):
    ep = env.episode(row_to_task(row))
    ep.call_tool("submit_schedule", {"schedule": schedule})
    return ep.verify()


async def test_full_episode_matches_in_process(env, rows, url):
    async with NemoGymClient(url) as c:
        for row in rows[:5]:
            sched = greedy(row["info"]["prices"], None)
            s = await c.seed(row)
            text = await c.call_tool(s, "submit_schedule", {"schedule": sched})
            assert text.startswith("profit ")
            response = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}
            out = await c.verify(s, row, response=response)
            want = expected(env, row, sched)
            assert out["reward"] == want.reward and out["mask_sample"] is False and out["failure_kind"] is None
            assert out["metrics"] == pytest.approx(want.metrics)
            assert out["task_id"] == row["task_id"] and out["responses_create_params"] == row["responses_create_params"]
            assert out["response"] == response  # echoed, as NeMo Gym's verify response model requires
            assert out["profit"] == out["metrics"]["profit"]  # metrics also top-level, NeMo Gym's convention
            assert (await c.verify(s, row))["reward"] == want.reward  # a second verify answers the same
            await c.close(s)
            await c.close(s)  # idempotent


async def test_96_concurrent_sessions_never_mix(env, rows, url):
    rng = random.Random(0)
    async with NemoGymClient(url) as c:
        seeded = await asyncio.gather(*(c.seed(r) for r in rows[:96]))

        async def play(i):
            row, s = rows[i], seeded[i]
            prices = row["info"]["prices"]
            await asyncio.sleep(rng.random() * 0.05)
            await c.call_tool(s, "submit_schedule", json.dumps({"schedule": [1] * 24}))
            await asyncio.sleep(rng.random() * 0.05)
            sched = greedy(prices, None) if i % 2 else [0] * 24
            await c.call_tool(s, "submit_schedule", {"schedule": sched})
            out = await c.verify(s, row, "ok")
            await c.close(s)
            return out, expected(env, row, sched)

        results = await asyncio.gather(*(play(i) for i in rng.sample(range(96), 96)))
    for out, want in results:
        assert out["reward"] == want.reward
        assert out["metrics"]["profit"] == pytest.approx(want.metrics["profit"])
        assert out["metrics"]["submissions"] == 2.0
    assert len({round(o["metrics"]["optimal_profit"], 2) for o, _ in results}) > 90  # distinct days, not one


async def test_masked_default_and_close(rows, url):
    async with NemoGymClient(url) as c:
        out = await c.verify(Session({COOKIE: "forged.0000"}), rows[0], "x")
        assert out["mask_sample"] is True and out["reward"] == 0.0 and out["failure_kind"] == "session_lost"
        s = await c.seed(rows[0])
        await c.close(s)
        out = await c.verify(s, rows[0], "x")
        assert out["mask_sample"] is True and out["failure_kind"] == "session_lost" and "closed" in out["failure_reason"]
        assert "masked" in await c.call_tool(s, "submit_schedule", {"schedule": [0] * 24})


async def test_bad_tool_arguments_get_the_tools_error_text(rows, url):
    async with NemoGymClient(url) as c:
        s = await c.seed(rows[0])
        assert "not valid JSON" in await c.call_tool(s, "submit_schedule", "{oops")
        assert "exactly 24" in await c.call_tool(s, "submit_schedule", {"schedule": [0]})
        assert "unknown tool" in await c.call_tool(s, "buy_more", {})
        out = await c.verify(s, rows[0], None)
        assert out["reward"] == 0.0 and out["mask_sample"] is False and out["metrics"]["invalid_submissions"] == 2.0


async def test_idle_timeout_reaps(env, rows):
    with serve_in_thread(ServerState(env=env, idle_timeout_s=0.3)) as u:
        async with NemoGymClient(u) as c:
            s = await c.seed(rows[0])
            assert (await c.health())["live_sessions"] == 1
            await asyncio.sleep(1.0)
            h = await c.health()
            assert h["live_sessions"] == 0 and h["idle_timeout_s"] == 0.3
            out = await c.verify(s, rows[0], "x")
            assert out["mask_sample"] is True and out["failure_kind"] == "session_expired"


async def test_masked_as_error_answers_503(env, rows):
    with serve_in_thread(ServerState(env=env, masked_as_error=True)) as u:
        async with httpx.AsyncClient(base_url=u) as h:
            r = await h.post("/verify", json=rows[0], headers={"cookie": f"{COOKIE}=nope.abc"})
            assert r.status_code == 503 and r.json()["failure_kind"] == "session_lost"
            r = await h.post("/submit_schedule", json={"schedule": [0] * 24})
            assert r.status_code == 503 and "Retry-After" not in r.headers
        async with NemoGymClient(u, retry_deadline_s=5) as c:  # not retried: answered at once, masked
            out = await c.verify(Session({COOKIE: "x.y"}), rows[0], "x")
            assert out["mask_sample"] is True and out["failure_kind"] == "session_lost"
            with pytest.raises(NemoGymError) as e:
                await c.call_tool(Session({COOKIE: "x.y"}), "submit_schedule", {})
            assert e.value.kind == "session_lost"


async def test_capacity_answers_503_with_retry_after(env, rows):
    with serve_in_thread(ServerState(env=env, max_concurrent=2, at_capacity="reject")) as u:
        async with NemoGymClient(u, retry_deadline_s=0.5) as c:
            a, _ = await c.seed(rows[0]), await c.seed(rows[1])
            async with httpx.AsyncClient(base_url=u) as h:
                r = await h.post("/seed_session", json=rows[2])
                assert r.status_code == 503 and r.headers["Retry-After"] == "1"
            with pytest.raises(NemoGymError) as e:
                await c.seed(rows[2])
            assert e.value.kind == "unavailable"
            assert (await c.health())["max_concurrent"] == 2
        async with NemoGymClient(u, retry_deadline_s=10) as c:
            waiter = asyncio.create_task(c.seed(rows[2]))  # retries, honouring Retry-After
            await asyncio.sleep(0.2)
            await c.verify(a, rows[0], "x")  # verify ends the episode and frees a slot
            await asyncio.wait_for(waiter, 5)


async def test_token(env, rows):
    with serve_in_thread(ServerState(env=env, token="s3cret")) as u:
        async with httpx.AsyncClient(base_url=u) as h:
            assert (await h.post("/seed_session", json=rows[0])).status_code == 401
            assert (await h.get("/health")).status_code == 200
        async with NemoGymClient(u, token="s3cret") as c:
            s = await c.seed(rows[0])
            assert (await c.verify(s, rows[0], "x"))["reward"] == 0.0


def fuzz_bodies(rng: random.Random, row: dict) -> list[tuple[str, bytes | None, dict]]:
    junk = [b"", b"{", b"null", b"[]", b"[1,2]", b"42", b'"str"', b"\xff\xfe\x00", b"{}" * 3, b'{"a":' * 50,
            b"NaN", b'{"responses_create_params": 1}', json.dumps({**row, "task_id": 5}).encode(),
            json.dumps({**row, "info": []}).encode(), json.dumps({**row, "index": "x"}).encode(),
            json.dumps({**row, "info": {"prices": [1] * 3}, "task_id": "nope"}).encode(),
            json.dumps({"responses_create_params": {"input": "hi"}, "task_id": "gridsim-x"}).encode(),
            json.dumps({"responses_create_params": {"input": [1]}, "task_id": "t"}).encode(),
            json.dumps({"responses_create_params": {"input": [], "tools": "x"}, "task_id": "t"}).encode(),
            json.dumps({**row, "response": 5}).encode(), json.dumps({**row, "response": {"output": 3}}).encode(),
            json.dumps({"schedule": [0] * 24}).encode(), json.dumps({"schedule": "x" * 1000}).encode()]  # fmt: skip
    paths = ["/seed_session", "/verify", "/close_session", "/submit_schedule", "/nope", "/health"]
    out = []
    for _ in range(1000):
        body = rng.choice(junk) if rng.random() < 0.8 else bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        cookies = rng.choice([{}, {"cookie": f"{COOKIE}=garbage"}, {"cookie": f"{COOKIE}=a.b"}])
        out.append((rng.choice(paths), body, cookies))
    return out


async def test_fuzz_1000_malformed_requests_no_5xx(rows, url):
    rng = random.Random(1)
    statuses: dict[int, int] = {}
    async with httpx.AsyncClient(base_url=url) as h:
        for path, body, cookies in fuzz_bodies(rng, rows[0]):
            r = await h.post(path, content=body, headers={"content-type": "application/json", **cookies})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code < 500, (path, body[:80], r.status_code, r.text[:200])
            if path == "/seed_session" and r.status_code == 422:
                assert r.json()["detail"][0]["loc"][0] == "body"
    assert statuses.get(422, 0) > 100
    async with httpx.AsyncClient(base_url=url) as h:
        r = await h.post("/seed_session", json={**rows[0], "index": "x"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "index"]
        r = await h.post("/seed_session", json={"task_id": "x"})  # nothing to rebuild the episode from
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "info"]
        r = await h.post("/seed_session", json={**rows[0], "responses_create_params": {"tools": []}})
        assert r.json()["detail"][0]["loc"] == ["body", "responses_create_params", "input"]


async def test_reverse_text_over_http():
    rt = load_env("reverse-text")
    task = rt.tasks("eval")[0]
    row = task_to_row(task)
    with serve_in_thread(ServerState(env=rt)) as u:
        async with NemoGymClient(u) as c:
            s = await c.seed(row)
            resp = {"output": [{"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": task.info["text"][::-1]}]}]}  # fmt: skip
            assert (await c.verify(s, row, resp))["reward"] == 1.0


def test_write_rows_roundtrip(tmp_path, env):
    small = GridSimEnv(num_train=30, num_eval=10)
    root = write_server("gridsim", tmp_path, env=small)
    assert root == tmp_path / "resources_servers" / "gridsim_v1"
    train, ev = read_rows(root / "data" / "train.jsonl"), read_rows(root / "data" / "eval.jsonl")
    assert (len(train), len(ev)) == (30, 10)
    assert set(ev[0]) == {"responses_create_params", "task_id", "split", "index", "info"}
    tool = ev[0]["responses_create_params"]["tools"][0]
    assert tool["name"] == "submit_schedule" and tool["strict"] is False
    back = row_to_task(ev[3])
    orig = small.tasks("eval")[3]
    assert (back.task_id, back.messages, back.tools, back.info) == (orig.task_id, orig.messages, orig.tools, orig.info)
    assert (root / "configs" / "gridsim_v1.yaml").is_file() and json.loads((root / "server.json").read_text())["env"]


def test_cli_write_and_help(tmp_path):
    out = subprocess.run([sys.executable, "-m", "prime_rl.cli.env_server", "write", "reverse-text", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert len(read_rows(tmp_path / "resources_servers" / "reverse_text_v1" / "data" / "eval.jsonl")) == 100
    code = ("import sys; from prime_rl.cli.env_server import main\ntry: main(['serve', '--help'])\n"
            "except SystemExit: pass\nassert not {'torch','vllm','transformers','fastapi','numpy'} & set(sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--masked-as-error" in out.stdout, out.stderr


def test_cli_write_synthetic_gridsim(tmp_path):
    """`--synthetic` writes synthetic days and records it for the server; the default is the packaged real days."""
    out = subprocess.run([sys.executable, "-m", "prime_rl.cli.env_server", "write", "gridsim", str(tmp_path),
                          "--synthetic"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    root = tmp_path / "resources_servers" / "gridsim_v1"
    assert json.loads((root / "server.json").read_text())["env_args"] == {"synthetic": True}
    first = row_to_task(read_rows(root / "data" / "eval.jsonl")[0])
    assert first.info["prices"] == GridSimEnv(synthetic=True).tasks("eval")[0].info["prices"]
    assert first.info["prices"] != GridSimEnv().tasks("eval")[0].info["prices"]
    bad = subprocess.run([sys.executable, "-m", "prime_rl.cli.env_server", "write", "reverse-text", str(tmp_path),
                          "--synthetic"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "gridsim only" in bad.stderr


def test_cli_serve_taken_port_fails_fast_naming_it(tmp_path):
    import socket
    import time

    write_server("reverse-text", tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "prime_rl.cli.env_server", "serve",
                              str(tmp_path / "resources_servers" / "reverse_text_v1"), "--port", str(port)],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 2  # a user error, as every command's
        assert f"port {port}" in out.stderr and "already in use by pid" in out.stderr, out.stderr
        assert "choose another port (port / --port)" in out.stderr and "Traceback" not in out.stderr
        assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("host, token, warned", [("0.0.0.0", None, True), ("0.0.0.0", "s3cret", False),
                                                 ("127.0.0.1", None, False)])  # fmt: skip
def test_serve_warns_when_it_binds_beyond_loopback_without_a_token(tmp_path, monkeypatch, capsys, host, token, warned):
    import uvicorn

    from prime_rl.config.env_server import EnvServerServeConfig
    from prime_rl.envs.nemo_gym.cli import serve
    from prime_rl.ports import free_port

    root = write_server("reverse-text", tmp_path)
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)  # everything up to serving, nothing served
    serve(EnvServerServeConfig(dir=root, host=host, port=free_port(), token=token))
    assert ("without --token" in capsys.readouterr().err) == warned
