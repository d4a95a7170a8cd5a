"""`rl` refuses a resume that has nothing complete to load before anything starts (the "previous run" check of the
launch plan, through `rl --dry-run`): a fork (`ckpt.resume_dir`) at a folder without a complete trainer and
orchestrator checkpoint, a `ckpt.resume_step` with no complete checkpoint in the run's own folder, trainer and
orchestrator resuming different checkpoints, and a fork from inside the run's own folder. Each exits 2 with no
traceback and a message naming the field, the folder searched, the missing part, the complete steps and the fix.
A complete fork source and an own `resume_step` resolve into the plan. Checkpoints here are folders with their
`STABLE` markers: the check reads the markers only (what the trainer and orchestrator load is tested with them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.launcher.test_launch_plan import BIN, DEMO, demo_args, rows_at, run_dry, tiny  # noqa: F401 (fixture)

from prime_rl.config.loader import parse_config
from prime_rl.config.trainer import TrainerConfig


def written_trainer(tmp_path: Path, folder: str = "configs") -> TrainerConfig:
    """The trainer config the dry run wrote (`configs/dry-run` where the run's own configs held other settings)."""
    return parse_config(TrainerConfig, ["@", str(tmp_path / "run" / folder / "trainer.toml")])


def checkpoint(ckpts: Path, step: int, trainer: str = "done", orchestrator: str = "done") -> Path:
    """`ckpts/step_N` with each part `done` (folder and STABLE), `cut` (folder without STABLE) or `none`."""
    d = ckpts / f"step_{step}"
    d.mkdir(parents=True)
    for part, state in (("trainer", trainer), ("orchestrator", orchestrator)):
        if state != "none":
            (d / part).mkdir()
        if state == "done":
            (d / part / "STABLE").write_text("")
    return d


@pytest.fixture
def source(tmp_path) -> Path:
    """Another run's checkpoints: step 2 and 4 complete, step 3 cut short (trainer without STABLE, no orchestrator),
    step 5 with the trainer's part only, step 6 with the orchestrator's only."""
    ckpts = tmp_path / "run-a/checkpoints"
    checkpoint(ckpts, 2)
    checkpoint(ckpts, 3, trainer="cut", orchestrator="none")
    checkpoint(ckpts, 4)
    checkpoint(ckpts, 5, orchestrator="none")
    checkpoint(ckpts, 6, trainer="none", orchestrator="cut")
    return ckpts


@pytest.mark.parametrize("step, missing", [
    (3, ["trainer/ has no STABLE marker", "orchestrator/ is missing"]),
    (5, ["orchestrator/ is missing"]),
    (6, ["trainer/ is missing", "orchestrator/ has no STABLE marker"]),
    (7, ["does not exist"]),
])  # fmt: skip
def test_a_fork_from_an_incomplete_checkpoint_is_refused(tmp_path, tiny, capsys, source, step, missing):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-dir", str(source / f"step_{step}")),
                             capsys)  # fmt: skip
    assert code == 2, out + err
    assert f"ckpt.resume_dir = '{source / f'step_{step}'}' (from --ckpt.resume-dir)" in err
    for m in missing:
        assert m in err
    assert f"complete checkpoints under {source}: steps 2, 4" in err
    assert f"set ckpt.resume_dir to one of them (e.g. {source / 'step_4'})" in err
    assert "Traceback" not in err and not (tmp_path / "run/configs").exists()


def test_a_relative_fork_source_is_named_as_written(tmp_path, tiny, capsys, source, monkeypatch):  # noqa: F811
    """A relative `ckpt.resume_dir`: the message names the folders relative to the working directory, as written."""
    rows_at(tmp_path / "gym-root")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-dir", "run-a/checkpoints/step_3"),
                             capsys)  # fmt: skip
    assert code == 2, out + err
    assert ("ckpt.resume_dir = 'run-a/checkpoints/step_3' (from --ckpt.resume-dir): run-a/checkpoints/step_3 is not a "
            "complete checkpoint") in err
    assert "complete checkpoints under run-a/checkpoints: steps 2, 4" in err
    assert "set ckpt.resume_dir to one of them (e.g. run-a/checkpoints/step_4)" in err


def test_a_fork_from_a_run_without_checkpoints_names_ckpt_interval(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    empty = tmp_path / "run-a/checkpoints"
    empty.mkdir(parents=True)
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-dir", str(empty / "step_2")), capsys)
    assert code == 2, out + err
    assert f"complete checkpoints under {empty}: none" in err and "ckpt.interval" in err


def test_the_real_rl_refuses_a_fork_without_a_traceback(tmp_path, tiny, source):  # noqa: F811
    """The command as a user types it, the fork in a TOML file: exit 2 before anything starts (no log, no configs)."""
    rows_at(tmp_path / "gym-root")
    fork = tmp_path / "fork.toml"
    fork.write_text(f'[ckpt]\nresume_dir = "{source / "step_5"}"\n')
    args = demo_args(tmp_path, tiny) + ["@", str(fork)]
    r = subprocess.run([str(BIN / "rl"), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"ckpt.resume_dir = '{source / 'step_5'}' (in {fork})" in r.stderr
    assert "orchestrator/ is missing" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr and "resume_step" not in r.stderr
    assert not (tmp_path / "run/configs").exists() and not (tmp_path / "run/logs/trainer.log").exists()


@pytest.mark.parametrize("step", ["3", "-1"])
def test_a_resume_step_without_a_checkpoint_in_the_run_is_refused(tmp_path, tiny, capsys, step):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-step", step), capsys)
    assert code == 2, out + err
    ckpts = tmp_path / "run/checkpoints"
    assert f"ckpt.resume_step = {step} (from --ckpt.resume-step)" in err and f"complete checkpoints under {ckpts}: none" in err
    assert "ckpt.resume_dir" in err  # the fix for a checkpoint of another run
    assert "Traceback" not in err


def test_a_resume_step_at_an_incomplete_own_checkpoint_names_the_part_and_the_complete_steps(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    ckpts = tmp_path / "run/checkpoints"
    checkpoint(ckpts, 2)
    checkpoint(ckpts, 3, orchestrator="cut")
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-step", "3"), capsys)
    assert code == 2, out + err
    assert f"ckpt.resume_step = 3 (from --ckpt.resume-step): {ckpts / 'step_3'} is not a complete checkpoint" in err
    assert "orchestrator/ has no STABLE marker" in err and "steps 2" in err and "ckpt.resume_step to one of" in err


def test_a_resume_step_at_a_complete_own_checkpoint_resumes_there(tmp_path, tiny, capsys):  # noqa: F811
    """Resuming an earlier step of this run: the plan resumes after it (later steps are dropped when the run starts,
    as with --resume); --resume with an explicit step takes that step, not the newest."""
    rows_at(tmp_path / "gym-root")
    ckpts = tmp_path / "run/checkpoints"
    checkpoint(ckpts, 2)
    checkpoint(ckpts, 4)
    for extra in ([], ["--resume"]):
        code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-step", "2", *extra), capsys)
        assert code == 0, out + err
        assert "resume after checkpoint step 2" in out
        written = written_trainer(tmp_path)
        assert written.ckpt.resume_step == 2


def test_trainer_and_orchestrator_must_resume_the_same_checkpoint(tmp_path, tiny, capsys, source):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--trainer.ckpt.resume-dir", str(source / "step_2")),
                             capsys)  # fmt: skip
    assert code == 2, out + err
    assert f"trainer.ckpt.resume_dir = '{source / 'step_2'}' (from --trainer.ckpt.resume-dir)" in err and "orchestrator.ckpt resumes nothing" in err
    assert "[ckpt]" in err


def test_a_fork_from_inside_the_runs_own_folder_is_refused(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    own = checkpoint(tmp_path / "run/checkpoints", 2)
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--ckpt.resume-dir", str(own), "--clean"), capsys)
    assert code == 2, out + err
    assert "ckpt.resume_dir" in err and "this run's own output_dir" in err and "--resume" in err
    assert (own / "trainer/STABLE").is_file()  # --clean did not remove the source


def test_a_complete_fork_resolves_and_resume_continues_the_fork(tmp_path, tiny, capsys, source):  # noqa: F811
    """A complete fork source resolves into a fork plan. A forked run that stopped is continued with --resume from
    its own newest checkpoint (the resume_dir of its config is then not loaded again)."""
    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny, None, None, "--ckpt.resume-dir", str(source / "step_4"))
    code, out, err = run_dry(args, capsys)
    assert code == 0, out + err
    assert f"fork of checkpoint step 4 ({source / 'step_4'})" in out
    assert written_trainer(tmp_path).ckpt.resume_dir == source / "step_4"
    checkpoint(tmp_path / "run/checkpoints", 6)  # the forked run saved step 6, then stopped
    code, out, err = run_dry(args + ["--resume"], capsys)
    assert code == 0, out + err
    assert "resume after checkpoint step 6" in out
    written = written_trainer(tmp_path, "configs/dry-run")  # the run's own configs hold the fork's settings: kept
    assert written.ckpt.resume_step == 6 and written.ckpt.resume_dir is None
    assert written_trainer(tmp_path).ckpt.resume_dir == source / "step_4"


@pytest.mark.parametrize("resume", [["--resume"], ["--ckpt.resume-step", "2"]])
def test_clean_with_a_resume_is_refused(tmp_path, tiny, capsys, resume):  # noqa: F811
    """--clean would remove the checkpoint the resume loads (before, --resume ignored --clean)."""
    rows_at(tmp_path / "gym-root")
    own = checkpoint(tmp_path / "run/checkpoints", 2)
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, *resume, "--clean"), capsys)
    assert code == 2, out + err
    assert "--clean removes the checkpoints that" in err and (own / "trainer/STABLE").is_file()


def test_a_relative_resume_dir_is_made_absolute_for_the_children(tmp_path, tiny, capsys, source, monkeypatch):  # noqa: F811
    """`ckpt.resume_dir` relative to the working directory `rl` runs in: the configs the children read, and the
    `rl.toml` a Slurm job's nodes read, hold it absolute, so a process started in another working directory (a
    node's `slurm.workdir`, `trainer @ configs/trainer.toml` by hand) loads the same checkpoint."""
    from prime_rl.config.loader import write_config
    from prime_rl.config.orchestrator import OrchestratorConfig
    from prime_rl.config.rl import RLConfig
    from prime_rl.launcher.plan import launch_config

    rows_at(tmp_path / "gym-root")
    monkeypatch.chdir(tmp_path)
    args = demo_args(tmp_path, tiny, None, None, "--ckpt.resume-dir", "run-a/checkpoints/step_4")
    code, out, err = run_dry(args, capsys)
    assert code == 0, out + err
    want = (tmp_path / "run-a/checkpoints/step_4").resolve()
    assert f"fork of checkpoint step 4 ({want})" in out
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert written_trainer(tmp_path).ckpt.resume_dir == want
    orch = parse_config(OrchestratorConfig, ["@", str(tmp_path / "run/configs/orchestrator.toml")])
    assert orch.ckpt.resume_dir == want
    monkeypatch.chdir(tmp_path)
    rl_toml = write_config(launch_config(parse_config(RLConfig, args)), tmp_path / "rl.toml")
    monkeypatch.chdir(elsewhere)
    back = parse_config(RLConfig, ["@", str(rl_toml)])  # no "set twice" between [ckpt] and the sections
    assert back.ckpt.resume_dir == back.trainer.ckpt.resume_dir == back.orchestrator.ckpt.resume_dir == want
