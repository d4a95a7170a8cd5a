"""prime-rl against the real verifiers 0.4.0 (issue 14): verifiers' `nemo-gym` taskset plays our resources server,
and any verifiers v1 taskset runs as `env.taskset.id` through prime-rl's agent loop with verifiers' own rewards.

verifiers pins openai < 3 and mcp == 2.0.0 while the project's vLLM brought openai 3.57 and mcp 2.3, so it is not
installed in the project's venv: these checks run in the verifiers peer venv (scripts/peer_venvs.py) with prime-rl's
sources on PYTHONPATH (peer/verifiers_checks.py; one run of it serves both tests). About 15 s once the venv is
cached.
"""

from __future__ import annotations

import json

import pytest
from tests.interop.conftest import run_peer

from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.nemo_gym.rows import row_to_task, task_to_row
from prime_rl.envs.nemo_gym.server import ServerState, serve_in_thread

pytestmark = pytest.mark.slow  # the first run builds the peer venvs (minutes, once per machine)

SCHED = [1, 1, 1, 1] + [0] * 16 + [-1, -1, -1, -1]


@pytest.fixture(scope="module")
def peer(verifiers_python, tmp_path_factory) -> dict:
    """Both checks in one run of the peer script (`both`: one start of the peer's Python with verifiers and
    prime-rl imported, ~10 s, instead of one per test), against our resources server on three eval rows of which
    one has no task_id; also the in-process episodes' rewards (`want`) for the same rows and tool call."""
    env = GridSimEnv(num_train=4, num_eval=4)
    rows = [task_to_row(t) for t in env.tasks("eval")[:3]]
    del rows[1]["task_id"]
    path = tmp_path_factory.mktemp("verifiers") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    want = []
    for r in rows:
        ep = env.episode(row_to_task(r, default_task_id="x"))
        ep.call_tool("submit_schedule", {"schedule": SCHED})
        want.append(ep.verify("done").reward)
    state = ServerState(env=env, name="gridsim_v1")
    with serve_in_thread(state) as url:
        out = run_peer(verifiers_python, "verifiers_checks.py", "both", url, str(path), json.dumps(SCHED))
    return {**out, "want": want}


def test_verifiers_nemo_gym_taskset_plays_our_server(peer):
    """Point 1 (verifiers' reward reads `response` and `responses_create_params` from the answer) and 4 (a row
    without task_id): setup, a tool call as its toolset posts it, and its `nemo_gym` reward equal the in-process
    episode's reward."""
    out = peer["nemo-gym"]
    assert out["rewards"] == pytest.approx(peer["want"])
    assert all(t.startswith('{"output":"profit') for t in out["tool_texts"])  # the model reads our JSON tool answer
    assert all(i["mask_sample"] is False and i["failure_kind"] is None for i in out["infos"])


def test_verifiers_taskset_through_our_agent_loop(peer):
    """`env.taskset.id = "vf_arith"` (a taskset written with verifiers' API in peer/vf_arith.py): its prompt, its
    `add` tool (state shared with its metric) and its `correct` reward run through prime-rl's agent loop, single-
    and multi-turn; each reward equals verifiers' own score of a Trace built independently from the same messages,
    and the hand-worked value (the scripted policy answers tasks 0-2 right, task 3 wrong)."""
    out = peer["adapter"]
    rollouts, independent = out["rollouts"], out["independent"]
    assert [r["task_id"] for r in rollouts] == [f"arith-{i}" for i in range(4)]
    assert all(r["tools"] == ["add"] and not r["masked"] for r in rollouts), rollouts
    assert [r["reward"] for r in rollouts] == [1.0, 1.0, 1.0, 0.0]
    assert [r["turns"] for r in rollouts] == [1, 2, 1, 1]  # task 1 called the tool, then answered
    assert [r["metrics"]["tool_calls"] for r in rollouts] == [0.0, 1.0, 0.0, 0.0]
    assert [r["reward"] for r in rollouts] == [i["reward"] for i in independent]
    assert [r["metrics"] for r in rollouts] == [i["metrics"] for i in independent]
    assert rollouts[1]["messages"][2]["content"] == "11"  # the tool's answer (4 + 7) reached the model
