"""`rl` with `[wandb]`: the launcher forwards trainer and orchestrator rows into ONE W&B run (offline here, read
back from its file), marks it failed when the run fails, and refuses to start when W&B cannot."""

from __future__ import annotations

import sys

from fake_children import fake_launch

from prime_rl.config.rl import RLConfig
from prime_rl.launcher.rl import launch_and_wait
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port
from wandb_offline import read_offline_run


def _cfg(tmp_path, steps=3) -> RLConfig:
    return RLConfig(max_steps=steps, output_dir=str(tmp_path), stop_grace_s=1.0, startup_timeout_s=30,
                    wandb={"project": "t", "name": "fake-rl", "offline": True})  # fmt: skip


def test_trainer_and_orchestrator_rows_land_in_one_offline_run(tmp_path):
    m = ["--metrics", str(tmp_path)]
    launch = fake_launch(str(tmp_path), free_port(), ["3", "--step-s", "0.2", *m], ["3", "--step-s", "0.3", *m])
    assert launch_and_wait(_cfg(tmp_path), lambda c: launch) == 0
    back = read_offline_run(tmp_path)
    assert (back.name, back.job_type, back.exit_code) == ("fake-rl", "rl", 0)
    assert [(r["step"], r["loss"]) for r in back.rows("trainer")] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    orch = back.rows("orchestrator")
    assert [(r["step"], r["reward"]) for r in orch] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert len(read_metrics(tmp_path)) == 6  # metrics.jsonl holds the same six rows
    assert (tmp_path / "plots" / "reward.png").is_file() and (tmp_path / "plots" / "loss.png").is_file()  # at the end
    table = back.table(orch[2]["rollouts"])
    assert table["data"][0][table["columns"].index("conversation")] == "[user] task 3\n[assistant] answer"


def test_failed_run_marks_the_wandb_run_failed(tmp_path):
    m = ["--metrics", str(tmp_path)]
    launch = fake_launch(str(tmp_path), free_port(), ["5", "--step-s", "0.2", "--die-at", "2", *m],
                         ["5", "--step-s", "0.3", *m])  # fmt: skip
    assert launch_and_wait(_cfg(tmp_path, 5), lambda c: launch) == 1
    back = read_offline_run(tmp_path)
    assert back.exit_code == 1 and [r["step"] for r in back.rows("trainer")] == [1]


def test_no_wandb_package_is_a_preflight_error(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)
    launch = fake_launch(str(tmp_path), free_port(), ["1"], ["1"])
    assert launch_and_wait(_cfg(tmp_path), lambda c: launch) == 2
    assert "prime-rl[wandb]" in caplog.text
