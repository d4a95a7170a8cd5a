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
