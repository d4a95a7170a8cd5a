"""prime-rl against the real nemo-gym 0.7.0 (issue 14): NeMo Gym's SimpleAgent plays our server; our client and
orchestrator source play NeMo Gym's example servers with their own rows; NeMo Gym's models and tools accept
what our server answers and what `env-server write` writes. Points refer to the issue's numbered list.

Takes about 40 s once the nemo-gym venv is cached (each NeMo Gym server start imports its package: ~5 s).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from tests.interop.conftest import REPO, peer_server, run_peer
from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import NemoGymTasksetConfig, RendererConfig, SamplingConfig
from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.nemo_gym.client import NemoGymClient
from prime_rl.envs.nemo_gym.responses import trajectory_response
from prime_rl.envs.nemo_gym.rows import read_rows, row_to_task, task_to_row, write_server
from prime_rl.envs.nemo_gym.server import ServerState, serve_in_thread
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.sources.nemo_gym import NemoGymSource

pytestmark = pytest.mark.slow  # the first run builds the peer venvs (minutes, once per machine)

SCHED = [1, 1, 1, 1] + [0] * 16 + [-1, -1, -1, -1]


@pytest.fixture(scope="module")
def nemo_root(nemo_python) -> Path:
    """Where the nemo-gym wheel put its example servers (`resources_servers/<name>/data/example.jsonl`)."""
    code = "import resources_servers; print(list(resources_servers.__path__)[0])"
    return Path(subprocess.check_output([str(nemo_python), "-c", code], text=True).strip())


@pytest.fixture(scope="module")
def stateful_url(nemo_python):
    with peer_server(nemo_python, "example", "example_session_state_mgmt") as ports:
        yield f"http://127.0.0.1:{ports['port']}"


@pytest.fixture(scope="module")
def weather_url(nemo_python):
    with peer_server(nemo_python, "example", "example_single_tool_call") as ports:
        yield f"http://127.0.0.1:{ports['port']}"


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _counter_plan(prompt: str) -> tuple[int, int]:
    found = re.findall(r"add (\d+)", prompt)
    if len(found) != 2:
        raise AssertionError(f"the counter script found {found} (not two 'add N') in the prompt {prompt!r}")
    return int(found[0]), int(found[1])


async def test_our_client_plays_nemo_stateful_server(stateful_url, nemo_root):
    """Point 2: NeMo Gym's cookie is `<ServerClass>___<name>`; our client keeps it, so the session's counter
    survives from seed to verify and every example row scores 1.0 (with the cookie lost it verified to 0.0)."""
    rows = read_rows(nemo_root / "example_session_state_mgmt" / "data" / "example.jsonl")
    assert rows and all("task_id" not in r for r in rows)
    async with NemoGymClient(stateful_url, retry_deadline_s=10) as c:
        for row in rows:
            s = await c.seed(row)
            assert [k.split("___")[0] for k in s.cookies] == ["StatefulCounterResourcesServer"]
            a, b = _counter_plan(row["responses_create_params"]["input"][0]["content"])
            await c.call_tool(s, "increment_counter", {"count": a})
            await c.call_tool(s, "increment_counter", {"count": b})
            assert json.loads(await c.call_tool(s, "get_counter_value", {})) == {"count": row["expected_count"]}
            out = await c.verify(s, row, trajectory_response([{"role": "assistant", "content": "done"}]))
            assert out["reward"] == 1.0 and out["mask_sample"] is False
            await c.close(s)  # 0.7's close body: accepted (a 422 raises)


def _nemo_rows(tmp_path: Path, src: Path) -> Path:
    d = tmp_path / src.parent.parent.name
    d.mkdir()
    for split in ("train", "eval"):
        (d / f"{split}.jsonl").write_text(src.read_text())
    return d / "train.jsonl"


def _weather_script(prompt: str, k: int) -> str:
    if "<tool_response>" not in prompt:
        return tool_call_text("get_weather", {"city": "San Francisco"})
    return "It is cold in San Francisco."


def _counter_script(prompt: str, k: int) -> str:
    a, b = _counter_plan(prompt)
    plan = [("increment_counter", {"count": a}), ("increment_counter", {"count": b}), ("get_counter_value", {})]
    done = prompt.count("<tool_response>")
    return tool_call_text(*plan[done]) if done < len(plan) else "The count is reached."


@pytest.mark.parametrize("example", ["example_single_tool_call", "example_session_state_mgmt"])
async def test_orchestrator_source_plays_nemo_examples(example, weather_url, stateful_url, nemo_root, tmp_path, tok):
    """Points 3 and 4: the source loads NeMo Gym's own rows (no `task_id`), the agent loop plays them through the
    server's tools, and `/verify` gets the whole trajectory as a Responses object: the weather verifier scores
    whether a `get_weather` function call happened (1.0), the stateful one the session's counter (1.0)."""
    url = weather_url if example == "example_single_tool_call" else stateful_url
    script = _weather_script if example == "example_single_tool_call" else _counter_script
    rows = _nemo_rows(tmp_path, nemo_root / example / "data" / "example.jsonl")
    src = NemoGymSource("nemo", NemoGymTasksetConfig(dataset=rows, task={"resources_url": url, "retry_deadline_s": 10}))
    src.max_turns = 6
    renderer = make_renderer(tok, RendererConfig())
    tasks = src.tasks("train")
    assert [t.task_id for t in tasks] == [f"train-{i}" for i in range(len(tasks))]
    try:
        for task in tasks:
            r = await run_rollout(task, src, ScriptedClient(tok, script), renderer, SamplingConfig(), AgentLimits(4096, 128))
            assert not r.masked, r.error
            assert r.reward == 1.0, (task.task_id, r.messages)
    finally:
        await src.aclose()


def _agent_script(tmp_path: Path) -> Path:
    p = tmp_path / "script.json"
    p.write_text(json.dumps([{"call": "submit_schedule", "arguments": {"schedule": SCHED}}, {"text": "done"}]))
    return p


def _expected(env: GridSimEnv, row: dict) -> float:
    ep = env.episode(row_to_task(row, default_task_id="x"))
    ep.call_tool("submit_schedule", {"schedule": SCHED})
    return ep.verify("done").reward


async def test_simple_agent_plays_our_server(nemo_python, tmp_path):
    """Points 1, 4 and 6: NeMo Gym's SimpleAgent `/run` (stub Responses model) plays GridSim rows on our server,
    one row without `task_id`; its verify response model needs `response` echoed. Three rollouts at once on a
    server admitting one episode: SimpleAgent never retries a 503, so the seeds queue, and all three score."""
    env = GridSimEnv(num_train=4, num_eval=4)
    rows = [task_to_row(t) for t in env.tasks("eval")[:3]]
    del rows[2]["task_id"]
    state = ServerState(env=env, name="gridsim_v1", max_concurrent=1)
    with serve_in_thread(state) as url, peer_server(nemo_python, "agent", "--resources-url", url, "--script",
                                                    str(_agent_script(tmp_path))) as ports:  # fmt: skip
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['agent']}", timeout=120) as h:
            answers = await asyncio.gather(*(h.post("/run", json=row) for row in rows))
    for row, a in zip(rows, answers, strict=True):
        assert a.status_code == 200, a.text[:2000]
        out = a.json()
        assert out["mask_sample"] is False and out["failure_kind"] is None
        assert out["reward"] == pytest.approx(_expected(env, row))
        assert [o["type"] for o in out["response"]["output"]] == ["function_call", "function_call_output", "message"]
    assert state.store.active == 0


async def test_simple_agent_gets_a_masked_answer_past_the_seed_deadline(nemo_python, tmp_path):
    """Point 6: when no slot frees before the seed deadline, a client that does not retry still gets one answer:
    the rollout comes back masked (`provider_quota_exhausted`), not an agent 500."""
    env = GridSimEnv(num_train=4, num_eval=4)
    rows = [task_to_row(t) for t in env.tasks("eval")[:2]]
    state = ServerState(env=env, max_concurrent=1, seed_wait_s=0.5)
    with serve_in_thread(state) as url, peer_server(nemo_python, "agent", "--resources-url", url, "--script",
                                                    str(_agent_script(tmp_path))) as ports:  # fmt: skip
        async with NemoGymClient(url) as c:
            held = await c.seed(rows[0])  # holds the only slot
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['agent']}", timeout=120) as h:
                a = await h.post("/run", json=rows[1])
            await c.close(held)
    assert a.status_code == 200, a.text[:2000]
    out = a.json()
    assert out["mask_sample"] is True and out["failure_kind"] == "provider_quota_exhausted", out


def test_nemo_gym_accepts_our_server_and_config(nemo_python, tmp_path):
    """Points 1, 5, 7 and 8, checked inside the nemo-gym venv with its own models and tools (nemo_checks.py): the
    written YAML passes NeMo Gym's config validation; 0.7's session contract (`check_resources_session_contract`)
    and seed/verify/close flow; verify answers validate as `BaseVerifyResponse` (repeatable; a tool call after it
    changes nothing); failure kinds are registered; `/reverify_mode`; `/aggregate_metrics` equals NeMo Gym's own
    `compute_aggregate_metrics`; tools answer JSON."""
    checks = run_peer(nemo_python, "nemo_checks.py", str(tmp_path))["checks"]
    failed = {k: v for k, v in checks.items() if v != "ok"}
    assert not failed, "\n".join(f"{k}:\n{v}" for k, v in failed.items())
    assert len(checks) == 8


def test_app_py_starts_the_way_nemo_gym_starts_it(tmp_path):
    """Point 7: NeMo Gym starts a server as `<python> <entrypoint>` in its folder with its config in
    $NEMO_GYM_CONFIG_DICT and the server's key in $NEMO_GYM_CONFIG_PATH; our `app.py` then serves on that port."""
    root = write_server("reverse-text", tmp_path)
    name = root.name
    cfg = yaml.safe_load((root / "configs" / f"{name}.yaml").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg[name]["resources_servers"][name].update(host="127.0.0.1", port=port)
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(cfg), "NEMO_GYM_CONFIG_PATH": name,
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    proc = subprocess.Popen([sys.executable, cfg[name]["resources_servers"][name]["entrypoint"]], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                h = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "app.py never answered /health"
                time.sleep(0.2)
        assert h["env"] == "reverse-text" and h["name"] == name
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bare = subprocess.run([sys.executable, "app.py"], cwd=root, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in env.items() if not k.startswith("NEMO_GYM")})  # fmt: skip
    assert bare.returncode == 1 and "env-server serve" in bare.stderr
