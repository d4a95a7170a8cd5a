"""What `rl` says on its own console before it starts anything (`launcher.notices`): the URL of each metrics endpoint
the run serves and a warning for `ckpt.skip_*` flags with nothing to resume. Through `rl`'s `prepare` (the plan
resolved and its file-system part executed, nothing started) with `rl`'s console logging, and through the dry
run. The real run's console is checked in tests/integration/test_metrics_scrape_rl.py."""

from __future__ import annotations

from pathlib import Path

from tests.launcher.test_launch_plan import cfg_of, demo_args, rows_at, run_dry, tiny  # noqa: F401 (fixture)
from tests.launcher.test_resume_preflight import checkpoint

from prime_rl.launcher.rl import prepare
from prime_rl.monitor.logger import setup_logging
from prime_rl.ports import free_port


def console_of_prepare(tmp_path, args: list[str], capsys) -> str:
    """rl's console (stderr, as `rl` sets up its logging) while `prepare` runs on `args`."""
    setup_logging("rl", tmp_path / "run")
    capsys.readouterr()
    prepare(cfg_of(args))
    return capsys.readouterr().err


def test_metrics_urls_on_rls_console(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    port = free_port()

    def args() -> list[str]:  # free ports now
        return demo_args(tmp_path, tiny, None, None, "--trainer.metrics-server.port", str(port),
                         "--orchestrator.metrics-server.port", "0")  # fmt: skip

    err = console_of_prepare(tmp_path, args(), capsys)
    assert f"trainer metrics: http://127.0.0.1:{port}/metrics" in err
    assert "orchestrator metrics: http://127.0.0.1:<port>/metrics, a free port chosen at start" in err
    assert "logs/orchestrator.log" in err
    code, out, _ = run_dry(args() + ["--clean"], capsys)  # the dry run lists them under the plan
    assert code == 0 and f"  trainer metrics: http://127.0.0.1:{port}/metrics" in out


def test_no_metrics_line_without_a_metrics_server(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    err = console_of_prepare(tmp_path, demo_args(tmp_path, tiny), capsys)
    assert "metrics: http" not in err and "resumes nothing" not in err


def test_skip_flags_without_a_resume_are_warned_on_rls_console(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")

    def args() -> list[str]:  # free ports now
        return demo_args(tmp_path, tiny, None, None, "--ckpt.skip-optimizer", "--orchestrator.ckpt.skip-dataloader")

    err = console_of_prepare(tmp_path, args(), capsys)
    line = next(ln for ln in err.splitlines() if "resumes nothing" in ln)
    assert "WARNING" in line
    assert "ckpt.skip_optimizer (from --ckpt.skip-optimizer)" in line
    assert "orchestrator.ckpt.skip_dataloader (from --orchestrator.ckpt.skip-dataloader)" in line
    assert "nothing is skipped; remove the flag, or name the checkpoint to resume" in line
    code, out, _ = run_dry(args() + ["--clean"], capsys)
    assert code == 0 and "warning: ckpt.skip_optimizer (from --ckpt.skip-optimizer)" in out


def test_skip_flags_of_a_fork_are_not_warned(tmp_path, tiny, capsys):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    src = checkpoint(tmp_path / "run-a/checkpoints", 2)
    args = demo_args(tmp_path, tiny, None, None, "--ckpt.skip-optimizer", "--ckpt.resume-dir", str(src))
    err = console_of_prepare(tmp_path, args, capsys)
    assert "resumes nothing" not in err


def test_recipe_settings_switched_off_by_a_layer_are_warned_on_rls_console(tmp_path, tiny, capsys):  # noqa: F811
    """A base config with the gate and the difficulty pool on, a layer that turns both off: each setting left without
    effect is warned about (named where it was set, with the fix) on rl's console and under the dry run's plan."""
    rows_at(tmp_path / "gym-root")
    base = tmp_path / "recipes.toml"
    base.write_text("[orchestrator.gate]\nreject_uniform = true\nmax_resample_factor = 3.0\n\n"
                    "[orchestrator.curriculum]\nsampler = \"difficulty_pool\"\nwindow = 8\n")  # fmt: skip

    def args() -> list[str]:  # free ports now
        return demo_args(tmp_path, tiny, None, None, "@", str(base), "--orchestrator.gate.reject-uniform", "false",
                         "--orchestrator.curriculum.sampler", "uniform")  # fmt: skip

    err = console_of_prepare(tmp_path, args(), capsys)
    gate = next(ln for ln in err.splitlines() if "orchestrator.gate.max_resample_factor" in ln)
    assert "WARNING" in gate and f"(in {base})" in gate and "no rejection criterion is" in gate
    code, out, _ = run_dry(args() + ["--clean"], capsys)
    assert code == 0
    assert (f"warning: orchestrator.curriculum.window (in {base}): curriculum.window is set, but curriculum.sampler = "
            "'uniform'") in out  # fmt: skip
    assert f"warning: orchestrator.gate.max_resample_factor (in {base}): gate.max_resample_factor = 3 is set" in out


def test_recipe_settings_at_their_default_switched_off_by_a_flag_are_warned(tmp_path, tiny):  # noqa: F811
    """The base sets the gate's factor and a pool field at their defaults; a flag turns the recipes off: both are
    warned about, named where they were set (the value being the default does not make them act)."""
    from prime_rl.launcher.notices import inert_recipes

    rows_at(tmp_path / "gym-root")
    base = tmp_path / "recipes.toml"
    base.write_text("[orchestrator.gate]\nreject_uniform = true\nmax_resample_factor = 2.0\n\n"
                    "[orchestrator.curriculum]\nsampler = \"difficulty_pool\"\nwindow = 16\n")  # fmt: skip
    cfg = cfg_of(demo_args(tmp_path, tiny, None, None, "@", str(base), "--orchestrator.gate.reject-uniform", "false",
                           "--orchestrator.curriculum.sampler", "uniform"))  # fmt: skip
    lines = inert_recipes(cfg)
    assert [line.split(":")[0] for line in lines] == [f"orchestrator.gate.max_resample_factor (in {base})",
                                                      f"orchestrator.curriculum.window (in {base})"]  # fmt: skip


def test_env_server_settings_without_a_nemo_gym_source_are_warned(tmp_path):
    """`[env_server]` describes the resources server rl starts for a source playing NeMo Gym rows: with no such
    source it does nothing, and each field set is named where it was set (a resolved config's whole section at its
    defaults is not); the docs' per-source overlay of the tool rung keeps a source that uses it."""
    from prime_rl.config.loader import parse_config
    from prime_rl.config.rl import RLConfig
    from prime_rl.launcher.notices import unused_env_server, warnings

    root = Path(__file__).resolve().parents[2]
    digit, tool = str(root / "examples/ladder/digit.toml"), str(root / "examples/ladder/tool.toml")
    over = tmp_path / "o.toml"
    over.write_text('[env_server]\nenv = "gridsim"\nsynthetic = true\n')
    lines = unused_env_server(parse_config(RLConfig, ["@", digit, "@", str(over)]))
    assert len(lines) == 1 and lines[0].startswith(
        f"env_server.env (in {over}), env_server.synthetic (in {over}) set, but no train or eval source plays NeMo "
        "Gym rows"), lines  # fmt: skip
    assert lines[0] in warnings(parse_config(RLConfig, ["@", digit, "@", str(over)]))
    assert unused_env_server(parse_config(RLConfig, ["@", digit])) == []
    assert unused_env_server(parse_config(RLConfig, ["@", tool, "--env-server.synthetic"])) == []  # a nemo-gym source
    dump = tmp_path / "rl.toml"  # as configs/rl.toml holds the section
    dump.write_text('[env_server]\nauto_start = true\nenv = "gridsim"\nsynthetic = false\nmasked_as_error = true\n'
                    'idle_timeout_s = 120.0\nmax_concurrent = 96\n')  # fmt: skip
    assert unused_env_server(parse_config(RLConfig, ["@", digit, "@", str(dump)])) == []
    doc = (root / "docs/orchestrator.md").read_text()
    start = doc.index("```toml\n", doc.index("The example below is an overlay of the tool-bandit rung")) + 8
    per_source = tmp_path / "per_source.toml"
    per_source.write_text(doc[start : doc.index("```", start)])
    assert unused_env_server(parse_config(RLConfig, ["@", tool, "@", str(per_source)])) == []
