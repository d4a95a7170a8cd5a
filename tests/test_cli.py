"""The one command-line style (`prime_rl.cli.command`, `prime_rl.config.loader.bind_args`): config commands, groups,
positional arguments and repeated list flags of the older argparse spellings, errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

from prime_rl.cli.command import Command, Group
from prime_rl.config.base import BaseConfig
from prime_rl.config.loader import bind_args, parse_config


class Inner(BaseConfig):
    level: int = 0


class Toy(BaseConfig):
    """A config with every kind of flag."""

    out: Path | None = None
    src: str = "a"
    flag: bool = False
    items: list[str] = Field(default_factory=list)
    inner: Inner = Inner()
    output_dir: Path = Path("outputs/toy")
    dry_run: bool = False


RAN: list[Toy] = []


def record(cfg: Toy) -> str:
    RAN.append(cfg)
    if cfg.src == "boom":
        raise ValueError("src = 'boom' is not allowed")
    return "ran"


TOY = Command("toy", f"{__name__}:Toy", f"{__name__}:record", "a toy command", positional=("out", "src"),
              user_errors=(ValueError,))  # fmt: skip


def test_bind_args_positionals_values_and_lists():
    args = ["@", "f.toml", "x", "--flag", "--items", "1", "2", "--inner.level", "3", "y", "--items", "3", "--flag",
            "false"]  # fmt: skip
    assert bind_args(Toy, args, ("out", "src")) == [
        "@", "f.toml", "--flag", "--items", "1", "2", "3", "--inner.level", "3", "--flag", "false", "--out", "x",
        "--src", "y",
    ]  # fmt: skip
    assert bind_args(Toy, ["--src=v", "x"], ("out",)) == ["--src=v", "--out", "x"]  # `=` carries its own value
    assert bind_args(Toy, ["--inner", "@", "i.toml", "x"], ("out",)) == ["--inner", "@", "i.toml", "--out", "x"]
    assert bind_args(Toy, ["x", "y", "z"], ("out",)) == ["--out", "x", "y", "z"]  # extras stay for the loader
    assert bind_args(Toy, ["--no-flag", "x"], ("out",)) == ["--flag", "false", "--out", "x"]  # --no-flag: no value
    assert parse_config(Toy, ["--flag", "--no-flag", "o"], positional=("out",)).flag is False
    cfg = parse_config(Toy, ["o", "--items", "a", "--items", "b", "--flag"], positional=("out",))
    assert (cfg.out, cfg.items, cfg.flag) == (Path("o"), ["a", "b"], True)


def test_command_runs_parses_and_reports(tmp_path, capsys):
    RAN.clear()
    assert TOY(["o", "s", "--inner.level", "2"]) == "ran"
    assert RAN[-1].out == Path("o") and RAN[-1].src == "s" and RAN[-1].inner.level == 2
    with pytest.raises(SystemExit) as e:
        TOY(["--inner.lvl", "2"], prog="prime-rl toy")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "prime-rl toy: config error" in err and "inner.lvl: unknown key" in err and "inner.level" in err
    with pytest.raises(SystemExit) as e:
        TOY(["o", "boom"])
    assert e.value.code == 2 and "toy: error: src = 'boom' is not allowed" in capsys.readouterr().err
    n = len(RAN)
    with pytest.raises(SystemExit) as e:
        TOY(["--dry-run", "--output-dir", str(tmp_path), "--src", "d"])
    assert e.value.code == 0 and len(RAN) == n  # dry run: the resolved config written, nothing run
    again = parse_config(Toy, ["@", str(tmp_path / "configs" / "toy.toml")])
    assert again.src == "d" and again.dry_run is False


def test_group_dispatches_lists_and_refuses(capsys):
    group = Group("tools", "toy tools", {"toy": TOY, "sub": Group("sub", "nested tools", {"toy": TOY})})
    RAN.clear()
    group(["sub", "toy", "o2"])
    assert RAN[-1].out == Path("o2")
    with pytest.raises(SystemExit) as e:
        group(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "  toy  a toy command" in out and "  sub  nested tools" in out
    with pytest.raises(SystemExit) as e:
        group(["sub", "nope"])
    assert e.value.code == 2
    assert "tools sub: unknown command 'nope'; choose one of: toy" in capsys.readouterr().err


def test_every_utility_is_a_prime_rl_command():
    from prime_rl.cli.prime_rl import main

    assert set(main.commands.names()) >= {"eval", "tiny-model", "smollm", "summary", "gridsim", "plot", "dashboard"}
    assert set(main.commands.get("gridsim").commands.names()) == {"baseline", "sft-data", "show", "pack-ercot"}


def test_older_summary_spelling_still_runs(tmp_path):
    """`python -m prime_rl.monitor.summary ...` (in older docs and scripts) is the same as `prime-rl summary`."""
    scores = tmp_path / "a.jsonl"
    scores.write_text("".join(json.dumps({"task_id": f"t{i}", "score": v}) + "\n" for i, v in enumerate([0.2, 0.4])))
    r = subprocess.run([sys.executable, "-m", "prime_rl.monitor.summary", "--entry", f"A={scores}",
                        "--out", str(tmp_path / "s.md")], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "| A | 2 | 0.3000 ± 0.1000 |" in (tmp_path / "s.md").read_text()


def _script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_evals_and_dashboard_are_console_scripts():
    """The reference system's command names: `evals` (a bare `eval` is bash's builtin) and `dashboard`."""
    for name, words in (("evals", "evaluate a model"), ("dashboard", "a live web page of a run")):
        r = subprocess.run([_script(name), "--help"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"usage: {name} ") and words in r.stdout, r.stdout[:300]


def test_eval_script_is_a_deprecated_alias_of_evals(tmp_path):
    r = subprocess.run([_script("eval"), "@", str(Path(__file__).parents[1] / "examples/gridsim/eval.toml"),
                        "--output-dir", str(tmp_path), "--dry-run"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "eval: deprecated name; the command is `evals`" in r.stderr
    assert (tmp_path / "configs" / "evals.toml").is_file()


def test_prime_rl_help_names_the_commands():
    from prime_rl.cli.prime_rl import main

    text = main.usage("prime-rl")
    assert "evals (= prime-rl eval)" in text and "`dashboard RUN_DIR`" in text
