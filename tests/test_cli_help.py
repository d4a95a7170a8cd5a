"""`--help` (one screen) and `--help-all` (every flag): every flag listed is one the loader accepts, booleans read
`--x/--no-x`, list items `--LIST.N.FIELD`, and each command's most used flags exist."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from prime_rl.cli.command import Command, Group
from prime_rl.config.help import all_flags, render_help
from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.registry import import_path

REPO = Path(__file__).resolve().parents[1]


def _commands() -> list[tuple[str, Command]]:
    out = []

    def add(prog: str, cmd) -> None:
        if isinstance(cmd, Group):
            for name in cmd.commands.names():
                add(f"{prog} {name}", cmd.commands.get(name))
        else:
            out.append((prog, cmd))

    for name in ("rl", "sft", "trainer", "orchestrator", "inference", "evals", "env_server", "dashboard", "prime_rl"):
        add(name.replace("_", "-"), importlib.import_module(f"prime_rl.cli.{name}").main)
    return out


@pytest.mark.parametrize("prog, cmd", _commands(), ids=[p for p, _ in _commands()])
def test_short_and_full_help_of_every_command(prog, cmd):
    cls = import_path(cmd.config, "config")
    short = render_help(cls, prog, cmd.help, common=cmd.common)  # KeyError for a `common` field that is no flag
    full = render_help(cls, prog, cmd.help, full=True)
    for text in (short, full):
        assert "{True,False}" not in text and "[*]" not in text, prog
    assert len(short.splitlines()) < 100, (prog, len(short.splitlines()))
    assert all(f in full for f in all_flags(cls))


def test_rl_help_is_one_screen_with_the_most_used_flags(capsys):
    from prime_rl.cli.rl import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert len(out.splitlines()) < 90
    assert "most used:" in out and "--orchestrator.train.group-size INT" in out and "--trainer.optim.lr FLOAT" in out
    assert "--orchestrator.advantage.type {grpo,rloo,maxrl,custom}" in out
    assert "--orchestrator.*" in out and "`rl --help-all`" in out and "--resume/--no-resume" in out
    with pytest.raises(SystemExit):
        main(["--help-all"])
    full = capsys.readouterr().out
    assert "--orchestrator.train.source.N.env.agent.max-turns INT" in full
    assert "--orchestrator.eval.source.N.name STR" in full and "--trainer.model.lora.rank" in full


_REFUSED = ("unknown key", "Unrecognized arguments", "config group", "not a list of sections", "no @ file gives",
            "requires a value")  # fmt: skip


@pytest.mark.parametrize("prog, config, files", [
    ("rl", "prime_rl.config.rl:RLConfig", ["examples/gridsim/rl.toml"]),
    ("evals", "prime_rl.config.orchestrator:EvalCommandConfig", ["examples/gridsim/eval.toml"]),
    ("sft", "prime_rl.config.trainer:SFTConfig", []),
])  # fmt: skip
def test_every_flag_help_all_lists_is_accepted(prog, config, files, tmp_path, monkeypatch):
    """Each flag of `--help-all`, with a value, is taken by the loader: at worst its value is wrong for the field
    (or the key belongs to another `type` of its section), never an unknown flag."""
    monkeypatch.chdir(REPO)
    cls = import_path(config, "config")
    extra = tmp_path / "lists.toml"  # one item in every list of sections the example file leaves empty
    extra.write_text({"rl": '[[orchestrator.eval.source]]\nname = "e"\nenv.id = "gridsim"\n',
                      "sft": '[[data.source]]\npath = "a.jsonl"\n[eval]\ninterval = 1\n[[eval.source]]\nname = "e"\n'
                             'env.id = "gridsim"\n'}.get(prog, ""))  # fmt: skip
    base = [x for f in files for x in ("@", f)] + (["@", str(extra)] if prog in ("rl", "sft") else [])
    flags = sorted(set(all_flags(cls)) - {"--help", "--help-all", "--dry-run"})
    assert len(flags) > 30
    for flag in flags:
        name = flag.split("/")[0].replace(".N.", ".0.")
        try:
            parse_config(cls, [*base, name, "1", "--output-dir", str(tmp_path)])
        except ConfigError as e:
            assert not any(r in str(e) for r in _REFUSED) or "not a setting of" in str(e), (flag, str(e))
