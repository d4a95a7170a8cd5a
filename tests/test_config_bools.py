"""A boolean field takes a boolean: text or a number in a TOML file is refused naming the key, the file and the fix
(`key = true`); a boolean flag takes true/false in any case or no value, not 1/0 or yes/no; text that reaches a
boolean field through a JSON flag is refused too (`config.bools`, `config.base.not_a_bool`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[1]
RL_TOML = str(REPO / "examples/gridsim/rl.toml")


def _error(args: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", RL_TOML, *args])
    return str(e.value)


def test_text_or_a_number_for_a_boolean_in_a_file_names_the_key_the_file_and_the_fix(tmp_path):
    f = tmp_path / "b.toml"
    f.write_text('[wandb]\noffline = "yes"\n\n[trainer]\nshared_prefix = 1\n\n[[orchestrator.train.source]]\n'
                 'name = "g"\nenv.id = "gridsim"\nadvantage.type = "grpo"\nadvantage.filter_zero = "true"\n')
    assert _error(["@", str(f)]).splitlines() == [
        f'  wandb.offline = "yes" (in {f}): text, not a boolean; TOML writes a boolean without quotes: offline = true '
        "or offline = false",
        f"  trainer.shared_prefix = 1 (in {f}): a number, not a boolean; TOML writes a boolean without quotes: "
        "shared_prefix = true or shared_prefix = false",
        f'  orchestrator.train.source[0].advantage.filter_zero = "true" (in {f}): text, not a boolean; TOML writes a '
        "boolean without quotes: filter_zero = true or filter_zero = false",
    ]


def test_a_file_under_a_section_flag_is_checked_under_that_section(tmp_path):
    f = tmp_path / "wandb.toml"
    f.write_text('offline = "no"\n')
    msg = _error(["--wandb", "@", str(f)])
    assert msg.startswith(f'  wandb.offline = "no" (in {f}): text, not a boolean')


def test_booleans_and_none_text_in_a_file_are_read(tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text('[wandb]\noffline = true\n\n[inference.vllm]\nenforce_eager = "None"\n\n[trainer]\nshared_prefix = false\n')
    cfg = parse_config(RLConfig, ["@", RL_TOML, "@", str(f)])
    assert (cfg.wandb.offline, cfg.inference.vllm.enforce_eager, cfg.trainer.shared_prefix) == (True, None, False)


@pytest.mark.parametrize("args", [
    ["--trainer.shared-prefix", "1"],
    ["--trainer.shared-prefix=0"],
    ["--trainer.shared-prefix", "yes"],
    ["--wandb.offline", "1"],
    ["--orchestrator.train.source.0.advantage.filter-zero", "0"],
])  # fmt: skip
def test_a_boolean_flag_refuses_1_0_and_yes(args):
    flag = args[0].split("=")[0]
    assert f"  {flag} takes true or false, or no value ({flag} alone = true, --no-{flag[2:]} = false; got" in _error(
        args)  # fmt: skip


def test_a_boolean_flag_of_a_list_item_takes_true_false_or_its_no_form():
    base = ["--orchestrator.train.source.0.advantage.type", "grpo"]
    for args, want in ((["--orchestrator.train.source.0.advantage.filter-zero", "TRUE"], True),
                       (["--orchestrator.train.source.0.advantage.filter-zero"], True),
                       (["--no-orchestrator.train.source.0.advantage.filter-zero"], False)):  # fmt: skip
        cfg = parse_config(RLConfig, ["@", RL_TOML, *base, *args])
        assert cfg.orchestrator.train.source[0].advantage.filter_zero is want


def test_text_for_a_boolean_in_a_json_flag_is_refused():
    items = [{"name": "g", "env": {"id": "gridsim"}, "advantage": {"type": "grpo", "filter_zero": "yes"}}]
    msg = _error(["--orchestrator.train.source", json.dumps(items)])
    assert ("orchestrator.train.source[0].advantage: filter_zero = 'yes': not a boolean; write filter_zero = true or "
            "filter_zero = false (TOML and JSON booleans are unquoted") in msg  # fmt: skip
    assert "(from --orchestrator.train.source)" in msg


def test_the_command_exits_2_without_traceback(tmp_path, capsys, monkeypatch):
    from prime_rl.cli.rl import main

    monkeypatch.chdir(REPO)
    f = tmp_path / "b.toml"
    f.write_text('[wandb]\noffline = "true"\n')
    with pytest.raises(SystemExit) as e:
        main(["@", RL_TOML, "@", str(f), "--dry-run", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err and "offline = true or offline = false" in err
