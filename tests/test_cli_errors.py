"""User errors of the commands: each names the field, the file or flag that set it and the fix, exits 2, and prints
no traceback."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RL_TOML = "examples/gridsim/rl.toml"
EVAL_TOML = "examples/gridsim/eval.toml"


def _fails(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err
    return err


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # the examples name their files relative to the repository


def test_a_key_of_another_advantage_type_names_the_type_the_file_and_the_fix(tmp_path, capsys):
    from prime_rl.cli.rl import main

    err = _fails(main, ["@", RL_TOML, "--orchestrator.advantage.type", "rloo", "--dry-run",
                        "--output-dir", str(tmp_path)], capsys)  # fmt: skip
    assert f"orchestrator.advantage.std_normalize (set in {RL_TOML}): not a setting of orchestrator.advantage.type " \
           "= 'rloo' (from --orchestrator.advantage.type); std_normalize is a setting of type 'grpo'" in err, err
    assert f"remove std_normalize from [orchestrator.advantage] in {RL_TOML}, or choose type 'grpo'" in err, err
    assert ".rloo." not in err  # pydantic's union tag is not part of the field's name


def test_shared_field_set_twice_names_the_file_and_the_flag(tmp_path, capsys):
    from prime_rl.cli.rl import main

    err = _fails(main, ["@", RL_TOML, "--trainer.max-steps", "30", "--dry-run", "--output-dir", str(tmp_path)], capsys)
    assert f"`max_steps = 50` (in {RL_TOML})" in err and "`trainer.max_steps = 30` (from --trainer.max-steps)" in err
    assert "set it once" in err and "<root>" not in err and "Value error" not in err


def test_indexed_flag_changes_one_item_of_a_list_from_the_file(tmp_path, capsys):
    from prime_rl.cli.evals import main

    with pytest.raises(SystemExit) as e:
        main(["@", EVAL_TOML, "--eval.source.0.env.agent.max-turns", "2", "--dry-run", "--output-dir", str(tmp_path)])
    assert e.value.code == 0, capsys.readouterr().err
    written = tomllib.loads((tmp_path / "configs" / "evals.toml").read_text())
    (source,) = written["eval"]["source"]
    assert source["env"]["agent"]["max_turns"] == 2 and source["name"] == "gridsim"  # the rest of the item kept


def test_indexed_flag_under_rl_and_its_errors(tmp_path, capsys):
    from prime_rl.cli.rl import main
    from prime_rl.config.loader import parse_config
    from prime_rl.config.rl import RLConfig

    cfg = parse_config(RLConfig, ["@", RL_TOML, "--orchestrator.train.source.0.env.agent.max-turns", "3"])
    assert cfg.orchestrator.train.source[0].env.agent.max_turns == 3
    base = ["@", RL_TOML, "--dry-run", "--output-dir", str(tmp_path)]
    err = _fails(main, [*base, "--orchestrator.train.source.2.env.agent.max-turns", "3"], capsys)
    assert f"`orchestrator.train.source` has 1 item(s) (from {RL_TOML}), counted from 0; index 2 is past" in err
    err = _fails(main, [*base, "--orchestrator.train.source.0.env.agent.max-turns", "x"], capsys)
    assert "orchestrator.train.source[0].env.agent.max_turns: Input should be a valid integer" in err
    assert "(from --orchestrator.train.source.0.env.agent.max-turns)" in err
    err = _fails(main, [*base, "--orchestrator.eval.sampling.0.temperature", "1"], capsys)
    assert "`orchestrator.eval.sampling` is not a list of sections" in err and "--orchestrator.eval.source.N" in err


def test_indexed_flag_without_items_in_a_file_says_how_to_give_the_list(tmp_path, capsys):
    from prime_rl.cli.evals import main

    err = _fails(main, ["--eval.source.0.name", "x", "--dry-run", "--output-dir", str(tmp_path)], capsys)
    assert "no @ file gives items of `eval.source`" in err and "[[eval.source]]" in err


def test_tiny_model_on_an_existing_file(tmp_path, capsys):
    from prime_rl.cli.prime_rl import main

    afile = tmp_path / "afile"
    afile.write_text("x")
    err = _fails(main, ["tiny-model", str(afile)], capsys)
    assert f"out: '{afile}' is an existing file" in err and f"e.g. {afile}-model" in err and "(the OUT argument)" in err
    err = _fails(main, ["tiny-model", "--out", str(afile)], capsys)
    assert "(from --out)" in err
    assert afile.read_text() == "x"


def test_env_server_write_a_url_with_a_wrong_scheme(tmp_path, capsys):
    from prime_rl.cli.env_server import main

    err = _fails(main, ["write", "htp://127.0.0.1:8200", str(tmp_path)], capsys)
    assert "env: 'htp://127.0.0.1:8200' looks like a URL, but its scheme is 'htp'" in err
    assert "(e.g. http://127.0.0.1:8200) (the ENV argument)" in err
    err = _fails(main, ["write", "127.0.0.1:8200", str(tmp_path)], capsys)
    assert "needs its scheme: http://127.0.0.1:8200" in err


def test_port_holder_command_line_is_cut_between_arguments():
    from prime_rl.ports import _shorten

    argv = ["python", "-m", "prime_rl.cli.env_server", "serve", "a" * 115, "--port", "9100"]
    text = _shorten(argv)
    assert text == f"python -m prime_rl.cli.env_server serve {'a' * 115} ... (2 more argument(s))"
    assert _shorten(["python", "x"]) == "python x"


def test_a_required_argument_left_out_names_its_flag_and_what_it_is(capsys):
    """`prime-rl sft-data reverse-text` without OUT: the flag, the kind of value, what it is and the bare argument
    that also gives it, instead of pydantic's `out: Field required`."""
    from prime_rl.cli.prime_rl import main

    err = _fails(main, ["sft-data", "reverse-text"], capsys)
    assert err == ("prime-rl sft-data: config error\n  out: required, not given: pass --out PATH (Output .jsonl file), "
                   "or give it as the OUT argument (`prime-rl sft-data ENV OUT ...`)\n"), err
    err = _fails(main, ["export-sft", "--out", "x.jsonl"], capsys)
    assert "  run: required, not given: pass --run PATH (Run directory (output_dir of rl or orchestrator)), or give " \
           "it as the RUN argument (`prime-rl export-sft RUN ...`)" in err, err
    assert "Field required" not in err


def test_a_required_section_or_field_inside_a_section_names_its_flags(tmp_path, capsys):
    from prime_rl.cli.rl import main

    teacher = tmp_path / "teacher.toml"
    teacher.write_text("[teacher]\n")
    err = _fails(main, ["@", str(teacher)], capsys)
    assert "  teacher.model: a required section, not given: set [teacher.model] in an @ file, or its fields with " \
           "--teacher.model.FIELD VALUE (The teacher model" in err, err
    err = _fails(main, ["--orchestrator.teacher.base-url", "http://x:1"], capsys)
    assert "  orchestrator.teacher.name: required, not given: pass --orchestrator.teacher.name STR (The model the " \
           "teacher server serves" in err, err
