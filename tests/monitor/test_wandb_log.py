"""W&B logging in offline mode, read back from the offline run file (tests/wandb_offline.py decodes it without
the SDK): every metrics.jsonl row with its values, the rollout and eval tables, the configs, the exit state."""

from __future__ import annotations

import json
import math
import sys

import pytest

from prime_rl.config.base import WandbConfig
from prime_rl.monitor.metrics import MetricsWriter, read_metrics
from prime_rl.monitor.wandb_log import WandbForwarder, WandbStartError, render_conversation
from wandb_offline import read_offline_run

MESSAGES = [
    {"role": "system", "content": "You run a battery."},
    {"role": "user", "content": "prices"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "submit_schedule", "arguments": '{"schedule":[0]}'}}]},
    {"role": "tool", "name": "submit_schedule", "tool_call_id": "c0", "content": "score 0.200"},
    {"role": "assistant", "content": "Submitted."},
]  # fmt: skip


def test_render_conversation_shows_roles_and_tool_calls():
    assert render_conversation(MESSAGES) == (
        "[system] You run a battery.\n[user] prices\n[assistant]\n"
        '  -> submit_schedule({"schedule":[0]})\n[tool submit_schedule] score 0.200\n[assistant] Submitted.'
    )


def _fake_run(run):
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "trainer.toml").write_text("[optim]\nlr = 0.001\n")
    (run / "configs" / "orchestrator.toml").write_text("batch_size = 8\n")
    MetricsWriter(run, "trainer").log(1, {"loss": 0.5, "lr": 1e-3, "grad_norm": float("nan"), "entropy": 2.25})
    traces = run / "rollouts" / "step_1" / "traces.jsonl"
    traces.parent.mkdir(parents=True)
    traces.write_text("".join(json.dumps({"step": 1, "task_id": f"t{i}", "source": "gridsim", "group_id": i,
                                          "reward": 0.2 * i, "advantage": 0.1, "masked": False, "error": None,
                                          "turns": 2, "truncated": False, "policy_versions": [0],
                                          "messages": MESSAGES}) + "\n" for i in range(3)))  # fmt: skip
    MetricsWriter(run, "orchestrator").log(1, {"reward": 0.2, "error_pct": 0.0, "max_off_policy": 1})
    (run / "eval").mkdir()
    (run / "eval" / "step_0.jsonl").write_text("".join(json.dumps({"step": 0, "source": "gridsim", "task_id": f"e{i}",
                                                                   "avg": i / 4, "pass": i == 3}) + "\n"
                                                       for i in range(4)))  # fmt: skip
    MetricsWriter(run, "eval").log(0, {"gridsim/avg@1": 0.375, "eval/time_s": 1.5})


def test_offline_run_holds_every_row_the_tables_and_the_configs(tmp_path):
    run = tmp_path / "run"
    _fake_run(run)
    fwd = WandbForwarder(WandbConfig(project="proj", name="demo", offline=True), run).start()
    assert fwd.poll() == 3
    with open(run / "metrics.jsonl", "a") as f:  # a row being written: forwarded only once complete
        f.write('{"process": "trainer", "step": 2, "time": 1.0, "loss": 0.25')
    assert fwd.poll() == 0
    with open(run / "metrics.jsonl", "a") as f:
        f.write(', "lr": 0.0005}\n')
    assert fwd.poll() == 1
    fwd.close()

    back = read_offline_run(run)
    assert (back.name, back.project, back.job_type, back.exit_code) == ("demo", "proj", "rl", 0)
    assert back.config["trainer"]["optim"]["lr"] == 0.001 and back.config["orchestrator"]["batch_size"] == 8
    for row in read_metrics(run):  # every metrics.jsonl row, every finite value, on its process's step axis
        logged = [r for r in back.rows(row["process"]) if r["step"] == row["step"]]
        assert len(logged) == 1, (row, logged)
        for k, v in row.items():
            if k in ("process", "step") or v is None:
                continue
            key = k.removeprefix(f"{row['process']}/")
            assert logged[0][key] == v, (k, v, logged[0])
    trainer = back.rows("trainer")
    assert [r["step"] for r in trainer] == [1, 2] and "grad_norm" not in trainer[0]  # NaN was written as null
    assert trainer[1]["loss"] == 0.25 and trainer[1]["lr"] == 0.0005
    rollouts = back.table(back.rows("orchestrator")[0]["rollouts"])
    assert rollouts["columns"][-1] == "conversation" and len(rollouts["data"]) == 3
    conv = rollouts["data"][2][-1]
    assert "-> submit_schedule(" in conv and "[tool submit_schedule] score 0.200" in conv
    assert rollouts["data"][2][rollouts["columns"].index("reward")] == pytest.approx(0.4)
    results = back.table(back.rows("eval")[0]["results"])
    assert len(results["data"]) == 4 and "avg" in results["columns"]
    assert back.rows("eval")[0]["gridsim/avg@1"] == 0.375 and back.rows("eval")[0]["time_s"] == 1.5
    assert math.isclose(sum(r[results["columns"].index("avg")] for r in results["data"]), 1.5)


def test_thread_forwarding_only_the_asked_processes(tmp_path):
    run = tmp_path / "sft-run"
    w = MetricsWriter(run, "sft")
    MetricsWriter(run, "other").log(1, {"x": 1.0})
    with WandbForwarder(WandbConfig(offline=True), run, processes={"sft"}, config={"sft": {"seed": 3}},
                        job_type="sft"):  # fmt: skip
        for step in range(1, 4):
            w.log(step, {"loss": 1.0 / step})
    back = read_offline_run(run)
    assert back.job_type == "sft" and back.name == "sft-run" and back.config["sft"] == {"seed": 3}
    assert [(r["step"], r["loss"]) for r in back.rows("sft")] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    assert back.rows("other") == []


def test_missing_wandb_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(WandbStartError, match=r"prime-rl\[wandb\]"):
        WandbForwarder(WandbConfig(offline=True), tmp_path).start()


def test_online_without_login_refuses_with_the_fix(tmp_path, monkeypatch):
    """Online W&B with no API key: a clear error before training, not a silent switch to offline."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    with pytest.raises(WandbStartError, match=r"wandb login.*wandb.offline = true"):
        WandbForwarder(WandbConfig(project="x"), tmp_path / "run").start()
