"""A dry run never alters the resolved configs of a run in its output_dir: a run's processes read
`output_dir/configs/*.toml` when they start (docs/scaling.md restarts a trainer by hand from them), so a dry run whose
resolved configs differ leaves those files as they are and writes its own to `configs/dry-run/`; identical ones are
left untouched, missing ones written (`config.resolved.write_dry_run`). Unit level: `rl --dry-run` starts nothing."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from prime_rl.config.resolved import config_to_toml, dry_run_lines, write_dry_run
from prime_rl.models.tiny import cached_tiny_model
from prime_rl.ports import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/ladder/digit_recipes.toml"


class Opt(BaseModel):
    lr: float = 1e-3


def _stamp(path: Path) -> tuple[int, int, bytes]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def test_write_dry_run_writes_missing_keeps_identical_and_diverts_a_differing_set(tmp_path):
    configs = tmp_path / "run" / "configs"
    first = write_dry_run({"trainer": Opt(lr=1e-3), "orchestrator": Opt(lr=2e-3)}, configs)
    assert first.paths == {"trainer": configs / "trainer.toml", "orchestrator": configs / "orchestrator.toml"}
    assert (first.unchanged, first.differ) == ([], [])
    assert (configs / "trainer.toml").read_text() == "lr = 0.001\n"
    before = {n: _stamp(configs / f"{n}.toml") for n in ("trainer", "orchestrator")}

    same = write_dry_run({"trainer": Opt(lr=1e-3), "orchestrator": Opt(lr=2e-3)}, configs)
    assert (same.unchanged, same.differ) == (["trainer", "orchestrator"], [])
    assert {n: _stamp(configs / f"{n}.toml") for n in ("trainer", "orchestrator")} == before  # not rewritten

    # the trainer's differs: neither file of the run is touched, the whole set goes to configs/dry-run/
    other = write_dry_run({"trainer": Opt(lr=5e-3), "orchestrator": Opt(lr=2e-3)}, configs)
    assert other.differ == ["trainer.toml"] and other.unchanged == []
    assert other.paths == {n: configs / "dry-run" / f"{n}.toml" for n in ("trainer", "orchestrator")}
    assert {n: _stamp(configs / f"{n}.toml") for n in ("trainer", "orchestrator")} == before
    assert (configs / "dry-run" / "trainer.toml").read_text() == "lr = 0.005\n"
    assert (configs / "dry-run" / "orchestrator.toml").read_text() == config_to_toml(Opt(lr=2e-3))
    lines = dry_run_lines(other, configs, "rl")
    assert lines[0].startswith(f"warning: {configs} holds resolved configs that differ from this dry run's "
                               f"(trainer.toml); a run in {configs.parent} may be using them")  # fmt: skip
    assert "stop that run's processes first; then `rl` without --dry-run writes them when it starts" in lines[0]
    assert lines[1:] == [f"resolved trainer config written to {configs}/dry-run/trainer.toml",
                         f"resolved orchestrator config written to {configs}/dry-run/orchestrator.toml"]  # fmt: skip


def _rl_dry_run(run: Path, port: int, *extra: str) -> int:
    from prime_rl.cli.rl import main

    with pytest.raises(SystemExit) as e:
        main(["@", EXAMPLE, "--model.name", str(cached_tiny_model()), "--output-dir", str(run),
              "--inference.server.port", str(port), "--dry-run", *extra])  # fmt: skip
    return e.value.code


def test_rl_dry_run_leaves_a_runs_differing_configs_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    run, port = tmp_path / "run", free_port()
    assert _rl_dry_run(run, port) == 0
    configs = run / "configs"
    names = sorted(p.name for p in configs.glob("*.toml"))
    assert names == ["inference.toml", "orchestrator.toml", "rl.toml", "trainer.toml"]
    before = {n: _stamp(configs / n) for n in names}
    capsys.readouterr()

    assert _rl_dry_run(run, port) == 0  # the same settings: nothing rewritten
    out = capsys.readouterr().out
    assert f"resolved trainer config unchanged in {configs}/trainer.toml" in out and "warning: " not in out
    assert {n: _stamp(configs / n) for n in names} == before

    assert _rl_dry_run(run, port, "--trainer.optim.lr", "0.01") == 0  # another lr: the run's files stay
    out = capsys.readouterr().out
    assert {n: _stamp(configs / n) for n in names} == before
    assert tomllib.loads((configs / "trainer.toml").read_text())["optim"]["lr"] == 3e-3
    assert tomllib.loads((configs / "dry-run" / "trainer.toml").read_text())["optim"]["lr"] == 0.01
    assert sorted(p.name for p in (configs / "dry-run").glob("*.toml")) == names
    assert f"warning: {configs} holds resolved configs that differ from this dry run's (" in out
    assert "trainer.toml" in out.split("warning: ", 1)[1].split(")", 1)[0]
    assert f"resolved trainer config written to {configs}/dry-run/trainer.toml" in out


def test_a_commands_dry_run_leaves_a_runs_differing_config_alone(tmp_path):
    configs = tmp_path / "run" / "configs"
    configs.mkdir(parents=True)
    (configs / "trainer.toml").write_text("# the live run's\n")
    before = _stamp(configs / "trainer.toml")
    r = subprocess.run([str(Path(sys.executable).parent / "trainer"), "--output-dir", str(tmp_path / "run"),
                        "--model.name", str(cached_tiny_model()), "--dry-run"], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert _stamp(configs / "trainer.toml") == before
    assert f"resolved trainer config written to {configs}/dry-run/trainer.toml" in r.stdout
    assert "then move the new files over them" in r.stdout


def test_slurm_dry_run_leaves_a_runs_differing_config_and_script_alone(tmp_path):
    (tmp_path / "model").symlink_to(cached_tiny_model())
    run = tmp_path / "run"
    args = [str(Path(sys.executable).parent / "rl"), "--output-dir", str(run), "--model.name", str(tmp_path / "model"),
            "--slurm.job-name", "grid", "--dry-run"]  # fmt: skip
    first = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    cfg, script = run / "configs" / "rl.toml", run / "slurm" / "rl.sbatch"
    before = (_stamp(cfg), _stamp(script))
    r = subprocess.run([*args, "--trainer.optim.lr", "0.01"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (_stamp(cfg), _stamp(script)) == before
    new_cfg, new_script = run / "configs" / "dry-run" / "rl.toml", run / "slurm" / "dry-run" / "rl.sbatch"
    assert tomllib.loads(new_cfg.read_text())["trainer"]["optim"]["lr"] == 0.01
    assert f"-m prime_rl.cli.rl_node @ {new_cfg}" in new_script.read_text()
    assert f"sbatch script written to {new_script}" in r.stdout
