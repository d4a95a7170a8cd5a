"""`env-server openenv` over real HTTP and WebSockets on 127.0.0.1, played with openenv-core's own clients.

GridSim is served the way a user starts it (the `env-server openenv gridsim` command, a subprocess, always killed);
reverse-text by the same app in a thread. Rewards are compared with the in-process episode of the same task and
actions; the NeMo Gym folder written from the server's URL with `env-server write gridsim`'s.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests.envs.openenv_support import require_openenv

require_openenv()

from openenv.core import GenericEnvClient  # noqa: E402
from websockets.asyncio.client import connect as ws_connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from prime_rl.envs import load_env  # noqa: E402
from prime_rl.envs.gridsim.baselines import greedy  # noqa: E402
from prime_rl.envs.nemo_gym.rows import write_server  # noqa: E402
from prime_rl.envs.nemo_gym.server import serve_in_thread  # noqa: E402
from prime_rl.envs.openenv.client import TaskEnvClient  # noqa: E402
from prime_rl.envs.openenv.models import TaskAction  # noqa: E402
from prime_rl.envs.openenv.server import build_app  # noqa: E402
from prime_rl.envs.reverse_text.env import lcs_ratio  # noqa: E402
from prime_rl.ports import free_port  # noqa: E402
from prime_rl.process import Child, ChildExited, ChildSpec, wait_for_http  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CAPACITY = 2  # --max-concurrent-envs of the GridSim server


@pytest.fixture(scope="module")
def gridsim():
    return load_env("gridsim")


@pytest.fixture(scope="module")
def gridsim_url(tmp_path_factory):
    """`env-server openenv gridsim --port P --max-concurrent-envs 2` in a subprocess; stopped at the end."""
    port = free_port()
    log = tmp_path_factory.mktemp("openenv") / "env-server.log"
    child = Child(ChildSpec("env-server", [sys.executable, "-m", "prime_rl.cli.env_server", "openenv", "gridsim",
                                           "--port", str(port), "--max-concurrent-envs", str(CAPACITY)],
                            log, env={"PYTHONPATH": str(REPO / "src")}))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:  # openenv-core's import (gradio) takes 5-30 s on 2 busy cores
        wait_for_http(url + "/", child, timeout_s=240)
        yield url
    except (ChildExited, TimeoutError) as e:
        pytest.fail(f"env-server openenv gridsim did not answer GET /: {e}\n{child.tail(30)}")
    finally:
        child.stop()


@pytest.fixture(scope="module")
def reverse_url():
    env = load_env("reverse-text")
    with serve_in_thread(build_app(env, "reverse-text", {}, max_concurrent_envs=4)) as url:
        yield url


def test_routes_list_the_splits_and_their_tasks(gridsim, gridsim_url):
    info = httpx.get(gridsim_url + "/").json()
    assert info["env"] == "gridsim" and info["env_args"] == {} and info["max_concurrent_envs"] == CAPACITY
    assert info["splits"] == {"all": {"path": "/all", "tasks": 2200}, "eval": {"path": "/eval", "tasks": 200}}
    listed = httpx.get(gridsim_url + "/eval/tasks").json()["tasks"]
    assert [t["task_id"] for t in listed] == [t.task_id for t in gridsim.tasks("eval")]
    every = httpx.get(gridsim_url + "/all/tasks").json()["tasks"]
    assert [(t["split"], t["index"]) for t in every] == [("train", i) for i in range(2000)] + [("eval", i) for i in range(200)]
    schema = httpx.get(gridsim_url + "/all/schema").json()
    assert schema["action"]["title"] == "TaskAction" and "tool_name" in schema["action"]["properties"]
    assert httpx.get(gridsim_url + "/eval/metadata").json()["name"] == "gridsim/eval"
    assert httpx.get(gridsim_url + "/eval/health").json()["status"] == "healthy"
    # OpenEnv's stateless HTTP routes: reset answers the task; a step has no episode to play
    first = httpx.post(gridsim_url + "/eval/reset", json={"index": 3}).json()
    assert first["observation"]["task_id"] == gridsim.tasks("eval")[3].task_id and first["done"] is False
    step = httpx.post(gridsim_url + "/eval/step", json={"action": {"type": "final"}}).json()
    assert step["done"] is True and "WebSocket session" in step["observation"]["error"]
    missing = httpx.post(gridsim_url + "/eval/reset", json={"task_id": "gridsim-1999-01-01-HB_WEST"})
    assert missing.status_code == 404 and "no task 'gridsim-1999-01-01-HB_WEST'" in missing.json()["detail"]
    bad = httpx.post(gridsim_url + "/eval/step", json={"action": {"type": "call_tool"}})
    assert bad.status_code == 422 and "tool_name" in bad.text


async def test_gridsim_episode_with_openenv_clients_equals_the_in_process_one(gridsim, gridsim_url):
    """reset, a submit_schedule step, the end: the reward is the in-process episode's score for the same schedule."""
    for task, base, reset in ((gridsim.tasks("eval")[0], "/eval", {"task_id": gridsim.tasks("eval")[0].task_id}),
                              (gridsim.tasks("eval")[7], "/all", {"index": 2007}),  # all = 2000 train, then eval
                              (gridsim.tasks("train")[5], "/all", {"seed": 2205})):  # seed mod 2200  # fmt: skip
        schedule = greedy(task.info["prices"], None)
        ref = gridsim.episode(task)
        text = ref.call_tool("submit_schedule", {"schedule": schedule})
        want = ref.verify()
        async with GenericEnvClient(base_url=gridsim_url + base) as client:
            first = await client.reset(**reset)
            obs = first.observation
            assert (obs["task_id"], obs["split"], obs["index"]) == (task.task_id, task.split, task.index)
            assert (obs["messages"], obs["tools"], obs["info"]) == (task.messages, task.tools, task.info)
            step = await client.step({"type": "call_tool", "tool_name": "submit_schedule",
                                      "arguments": {"schedule": schedule}})  # fmt: skip
            assert step.observation["result"] == text and not step.done and step.reward is None
            end = await client.step({"type": "final", "content": "I submitted the schedule."})
            assert end.done and end.reward == want.reward and end.observation["metrics"] == want.metrics
            assert 0.2 < end.reward < 1.0  # greedy: better than idle, short of the optimum
            state = await client.state()
            assert (state["step_count"], state["done"], state["reward"]) == (2, True, want.reward)
    # the typed client, with the model's arguments as JSON text and a malformed call first
    task = gridsim.tasks("eval")[1]
    schedule = greedy(task.info["prices"], None)
    ref = gridsim.episode(task)
    bad_text = ref.call_tool("submit_schedule", '{"schedule": [1, 2]}')
    ref.call_tool("submit_schedule", json.dumps({"schedule": schedule}))
    async with TaskEnvClient(base_url=gridsim_url + "/eval") as client:
        await client.reset(task_id=task.task_id)
        bad = await client.step(TaskAction(tool_name="submit_schedule", arguments='{"schedule": [1, 2]}'))
        assert bad.observation.result == bad_text and "not scored" in bad_text
        await client.step(TaskAction(tool_name="submit_schedule", arguments=json.dumps({"schedule": schedule})))
        end = await client.step(TaskAction(type="final"))
    assert end.done and end.reward == ref.verify().reward and end.observation.metrics["invalid_submissions"] == 1.0


def test_write_from_a_url_that_is_not_an_openenv_servers_root(reverse_url, tmp_path, capsys):
    from prime_rl.cli.env_server import main

    for url, msg in ((reverse_url + "/eval", "is not the root of an `env-server openenv` server"),
                     (f"http://127.0.0.1:{free_port()}", "nothing answers at")):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(["write", url, str(tmp_path)])
        assert e.value.code == 2 and msg in capsys.readouterr().err


def test_reverse_text_episode_equals_the_in_process_one(reverse_url):
    env = load_env("reverse-text")
    with TaskEnvClient(base_url=reverse_url + "/eval").sync() as client:
        for i in (0, 1, 2):  # no reset argument: the split's next task
            task = env.tasks("eval")[i]
            first = client.reset()
            assert first.observation.task_id == task.task_id and first.observation.tools == []
            answer = task.info["text"][::-1][:-2] + "xy"  # the reversal with its last two characters wrong
            end = client.step(TaskAction(type="final", content=answer))
            want = env.episode(task).verify(answer)
            assert end.done and end.reward == want.reward == lcs_ratio(answer, task.info["text"][::-1]) < 1.0


async def _session(url: str) -> tuple[object, dict]:
    """A raw WebSocket session on `url/ws`: the connection and the server's first answer (to a reset, or the
    capacity error it sends unasked before closing, maybe before our reset reached it)."""
    ws = await ws_connect(url.replace("http://", "ws://") + "/ws")
    try:
        await ws.send(json.dumps({"type": "reset", "data": {}}))
    except ConnectionClosed:
        pass  # refused: its answer is already in the receive buffer
    return ws, json.loads(await asyncio.wait_for(ws.recv(), timeout=30))


async def test_sessions_beyond_capacity_get_openenvs_capacity_answer(gridsim_url):
    url = gridsim_url + "/eval"
    held = []
    deadline = time.monotonic() + 30  # sessions of earlier tests may still be closing on the server
    while len(held) < CAPACITY:
        ws, answer = await _session(url)
        if answer["type"] == "observation":
            held.append(ws)
            continue
        await ws.close()
        assert answer["data"]["code"] == "CAPACITY_REACHED" and time.monotonic() < deadline, answer
        await asyncio.sleep(0.2)
    try:
        ws, answer = await _session(url)
        await ws.close()
        assert answer == {"type": "error", "data": {
            "message": f"Server at capacity: {CAPACITY}/{CAPACITY} sessions active. Cannot accept new connections.",
            "code": "CAPACITY_REACHED", "active_sessions": CAPACITY, "max_sessions": CAPACITY}}  # fmt: skip
        # openenv-core's client: a RuntimeError naming CAPACITY_REACHED, or the closed socket when the server's close
        # came before the client's reset was sent
        with pytest.raises((RuntimeError, ConnectionClosed), match="CAPACITY_REACHED|1000"):
            async with GenericEnvClient(base_url=url) as client:
                await client.reset()
        other = await _session(gridsim_url + "/all")  # each split is its own OpenEnv environment
        await other[0].close()
        assert other[1]["type"] == "observation"
    finally:
        for ws in held:
            await ws.close()
    deadline = time.monotonic() + 30
    while True:  # a freed slot admits the next session
        ws, answer = await _session(url)
        await ws.close()
        if answer["type"] == "observation":
            break
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.2)


def test_nemo_gym_folder_from_the_openenv_url_equals_env_server_write(gridsim, gridsim_url, tmp_path):
    from prime_rl.cli.env_server import main

    with pytest.raises(SystemExit) as e:
        main(["write", gridsim_url, str(tmp_path / "from_url"), "--synthetic"])
    assert e.value.code == 2  # the server chose its data
    main(["write", gridsim_url, str(tmp_path / "from_url")])
    got = tmp_path / "from_url" / "resources_servers" / "gridsim_v1"
    want = write_server("gridsim", tmp_path / "direct", {}, env=gridsim)
    for f in ("data/train.jsonl", "data/eval.jsonl", "server.json", "configs/gridsim_v1.yaml", "app.py"):
        assert (got / f).read_bytes() == (want / f).read_bytes(), f
    train = [json.loads(line) for line in (got / "data" / "train.jsonl").read_text().splitlines()]
    ev = [json.loads(line) for line in (got / "data" / "eval.jsonl").read_text().splitlines()]
    assert len(train) == 2000 and len(ev) == 200
    assert {r["split"] for r in train} == {"train"} and not {r["task_id"] for r in train} & {r["task_id"] for r in ev}
