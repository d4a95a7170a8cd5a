"""Runs inside the nemo-gym 0.7.0 peer venv with prime-rl's sources on PYTHONPATH: checks our resources server and
`env-server write` output with NeMo Gym's own models and tools, in process (FastAPI's TestClient on our app).
Prints one JSON line: {"checks": {name: "ok" | error text}}. Usage: python nemo_checks.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from fastapi.testclient import TestClient
from nemo_gym.base_resources_server import (
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    ReverifyMode,
)  # fmt: skip
from nemo_gym.config_types import AggregateMetrics, ResourcesServerInstanceConfig, maybe_get_server_instance_config
from nemo_gym.episode_types import EpisodeId, TaskId
from nemo_gym.failure_kinds import is_registered
from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.reward_profile import compute_aggregate_metrics
from nemo_gym.testing.session_conformance import check_resources_session_contract
from omegaconf import OmegaConf

from prime_rl.envs.gridsim.baselines import greedy
from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.nemo_gym.protocol import FAILURE_KINDS
from prime_rl.envs.nemo_gym.responses import trajectory_response
from prime_rl.envs.nemo_gym.rows import read_rows, row_to_task, write_server
from prime_rl.envs.nemo_gym.server import ServerState, create_app

CHECKS: dict[str, str] = {}


def check(fn):
    try:
        fn()
        CHECKS[fn.__name__] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test
        CHECKS[fn.__name__] = traceback.format_exc()[-3000:]
    return fn


OUT = Path(sys.argv[1])
ENV = GridSimEnv(num_train=8, num_eval=4)
ROOT = write_server("gridsim", OUT, env=ENV)
ROWS = read_rows(ROOT / "data" / "eval.jsonl")
SCHED = greedy(ROWS[0]["info"]["prices"], None)


def client() -> TestClient:
    return TestClient(create_app(ServerState(env=ENV, name=ROOT.name)), raise_server_exceptions=False)


def trajectory(text: str = "done") -> dict:
    msgs = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "submit_schedule",
             "arguments": json.dumps({"schedule": SCHED})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}, {"role": "assistant", "content": text}]  # fmt: skip
    return trajectory_response(msgs, tools=ROWS[0]["responses_create_params"]["tools"])


@check
def yaml_config_passes_nemo_gym_validation():
    cfg = OmegaConf.load(ROOT / "configs" / f"{ROOT.name}.yaml")
    for name in cfg:
        inst, err = maybe_get_server_instance_config(name, cfg[name])
        assert err is None, str(err)
        assert isinstance(inst, ResourcesServerInstanceConfig), type(inst)
        assert inst.get_inner_run_server_config().entrypoint == "app.py"
        for ds in inst.datasets:
            assert (OUT / ds.jsonl_fpath).is_file(), ds.jsonl_fpath


@check
def trajectory_is_a_nemo_gym_response():
    r = NeMoGymResponse.model_validate(trajectory())
    assert [o.type for o in r.output] == ["function_call", "function_call_output", "message"]


@check
def session_contract_of_0_7():
    row = ROWS[0]
    seed = ResourcesSeedSessionRequest(
        resources_session_id="rs-contract", episode_id=EpisodeId(rollout_id="r1"),
        task_id=TaskId(taskset="gridsim", task_id=row["task_id"]),
        task_data={k: v for k, v in row.items() if k != "responses_create_params"},
    )  # fmt: skip
    check_resources_session_contract(create_app(ServerState(env=ENV)), seed, keeps_state=True)


@check
def flow_of_0_7_seed_tool_verify_close():
    c, row = client(), ROWS[1]
    seed = ResourcesSeedSessionRequest(
        resources_session_id="rs-flow", episode_id=EpisodeId(rollout_id="r2", attempt=1),
        task_id=TaskId(taskset="gridsim", task_id=row["task_id"]),
        task_data={k: v for k, v in row.items() if k != "responses_create_params"},
    ).model_dump(mode="json")  # fmt: skip
    r = c.post("/seed_session", json=seed)
    assert r.status_code == 200, r.text
    assert ResourcesSeedSessionResponse.model_validate(r.json()).resources_session_id == "rs-flow"
    assert r.cookies, "no session cookie"
    sched = greedy(row["info"]["prices"], None)
    t = c.post("/submit_schedule", json={"schedule": sched})
    assert t.headers["content-type"].startswith("application/json") and t.json()["output"].startswith("profit")
    v = c.post("/verify", json={**row, "response": trajectory()})
    want = ENV.episode(row_to_task(row))
    want.call_tool("submit_schedule", {"schedule": sched})
    assert BaseVerifyResponse.model_validate(v.json()).reward == want.verify().reward
    close = ResourcesCloseSessionRequest(resources_session_id="rs-flow", episode_id=seed["episode_id"])
    r = c.post("/close_session", json=close.model_dump(mode="json"))
    assert ResourcesCloseSessionResponse.model_validate(r.json()).resources_session_id == "rs-flow"


@check
def legacy_verify_answer_is_nemo_gyms_verify_response():
    c, row = client(), ROWS[0]
    assert c.post("/seed_session", json=row).status_code == 200
    t = c.post("/submit_schedule", json={"schedule": SCHED})
    assert t.headers["content-type"].startswith("application/json"), t.headers  # NeMo Gym tools answer JSON
    v = c.post("/verify", json={**row, "response": trajectory()})
    vr = BaseVerifyResponse.model_validate(v.json())
    assert vr.mask_sample is False and vr.failure_kind is None and 0 < vr.reward <= 1
    again = c.post("/verify", json={**row, "response": trajectory("other")})  # repeatable: the same verdict
    assert again.json()["reward"] == vr.reward
    late = c.post("/submit_schedule", json={"schedule": [0] * 24}).json()["output"]
    assert "already verified" in late and "changed nothing" in late


@check
def masked_answers_use_registered_failure_kinds():
    assert all(is_registered(k) for k in FAILURE_KINDS), sorted(k for k in FAILURE_KINDS if not is_registered(k))
    c = client()
    c.cookies.set(f"PrimeRLResourcesServer___{ROOT.name}", "forged.0")
    v = BaseVerifyResponse.model_validate(c.post("/verify", json={**ROWS[0], "response": trajectory()}).json())
    assert v.mask_sample is True and is_registered(v.failure_kind), v.failure_kind


@check
def reverify_mode_is_nemo_gyms():
    assert ReverifyMode(client().get("/reverify_mode").json()) == ReverifyMode.UNSUPPORTED


@check
def aggregate_metrics_equal_nemo_gyms():
    vrs = [{"_ng_task_index": t, "_ng_rollout_index": k, "reward": r, "profit": p, "mask_sample": m}
           for t, k, r, p, m in [(0, 0, 1.0, 30.0, False), (0, 1, 0.25, 10.0, False), (1, 0, 0.5, 20.0, False),
                                 (1, 1, 0.0, 0.0, True), (2, 0, 0.0, 0.0, True)]]  # fmt: skip
    ours = AggregateMetrics.model_validate(client().post("/aggregate_metrics", json={"verify_responses": vrs}).json())
    theirs = compute_aggregate_metrics(vrs)
    assert ours.key_metrics == theirs.key_metrics, (ours.key_metrics, theirs.key_metrics)
    for k, v in ours.agent_metrics.items():
        assert abs(theirs.agent_metrics[k] - v) < 1e-9, (k, v, theirs.agent_metrics[k])
    for og, tg in zip(ours.group_level_metrics, theirs.group_level_metrics, strict=True):
        for k, v in og.items():
            assert tg[k] == v or abs(tg[k] - v) < 1e-9, (k, v, tg[k])


print(json.dumps({"checks": CHECKS}))
