"""The `trainer` console script (`sys.exit(main())`, as pip writes it) exits 0 after a finished run: the training
function returns the last step's metrics, which `sys.exit` would print and turn into exit code 1."""

from __future__ import annotations

import sys

import pytest


def test_the_trainer_console_script_exits_0_after_a_finished_run(tmp_path, monkeypatch, capsys):
    import prime_rl.trainer.rl
    from prime_rl.cli.trainer import main

    ran = []

    def fake_run(cfg):
        ran.append(cfg.output_dir)
        return {"loss": 0.5, "entropy": 1.0}  # what prime_rl.trainer.rl.run returns after its last step

    monkeypatch.setattr(prime_rl.trainer.rl, "run", fake_run)
    with pytest.raises(SystemExit) as e:
        sys.exit(main(["--output-dir", str(tmp_path / "run")]))
    assert e.value.code is None  # exit status 0
    assert ran == [tmp_path / "run"]
    assert "loss" not in capsys.readouterr().err


def test_a_resume_step_without_a_checkpoint_is_a_user_error(tmp_path):
    # `trainer @ output_dir/configs/trainer.toml --ckpt.resume-step K` with no complete trainer checkpoint at K:
    # one line naming the field, the folder and the complete steps, exit 2, no traceback
    import subprocess

    from prime_rl.models.tiny import cached_tiny_model

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    (tmp_path / "checkpoints" / "step_4" / "orchestrator").mkdir(parents=True)  # the orchestrator ran ahead
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.trainer", "--model.name", str(model), "--output-dir",
                        str(tmp_path), "--ckpt.resume-step", "4", "--max-steps", "5", "--threads", "1"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert (f"trainer: error: ckpt.resume_step = 4: no complete checkpoint {tmp_path}/checkpoints/step_4/trainer "
            "(complete ones: [])") in r.stderr  # fmt: skip
