"""How command-line flags take their values (`prime_rl.config.argv.bind_args`): a tuple field takes its values after
the flag or one JSON list, `--help` shows those values; a word after a boolean flag that is not true/false is refused
naming the flag; a list's JSON flag that does not parse names the flag; indexed flags change the list a JSON flag
gave. User errors exit 2 with no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prime_rl.config.base import BaseConfig
from prime_rl.config.loader import ConfigError, bind_args, parse_config
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[1]
RL_TOML = str(REPO / "examples/gridsim/rl.toml")


def _error(args: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", RL_TOML, *args])
    return str(e.value)


@pytest.mark.parametrize("args,want", [
    (["--orchestrator.gate.advantage-range", "0.1", "0.9"], (0.1, 0.9)),
    (["--orchestrator.gate.advantage-range", "[0.2, 0.8]"], (0.2, 0.8)),
    (["--orchestrator.gate.advantage-range=[0.3, 0.7]"], (0.3, 0.7)),
    (["--orchestrator.gate.advantage_range", "0", "2.5", "--orchestrator.batch-size", "8"], (0.0, 2.5)),
])  # fmt: skip
def test_a_tuple_field_takes_its_values_or_a_json_list(args, want):
    cfg = parse_config(RLConfig, ["@", RL_TOML, *args])
    assert cfg.orchestrator.gate.advantage_range == want


def test_a_tuple_flag_takes_negative_values_and_none():
    cfg = parse_config(RLConfig, ["@", RL_TOML, "--orchestrator.reward-range", "-5", "5"])
    assert cfg.orchestrator.reward_range == (-5.0, 5.0)
    cfg = parse_config(RLConfig, ["@", RL_TOML, "--orchestrator.reward-range=-2", "3"])
    assert cfg.orchestrator.reward_range == (-2.0, 3.0)
    cfg = parse_config(RLConfig, ["@", RL_TOML, "--orchestrator.gate.advantage-range", "0.1", "0.9",
                                  "--orchestrator.gate.advantage-range", "None"])  # fmt: skip
    assert cfg.orchestrator.gate.advantage_range is None


def test_a_tuple_flag_with_a_wrong_value_names_the_flag_and_the_forms():
    msg = _error(["--orchestrator.gate.advantage-range", "0.1"])
    assert msg == ("  --orchestrator.gate.advantage-range takes 2 values (--orchestrator.gate.advantage-range X X, or "
                   "one JSON list: --orchestrator.gate.advantage-range '[...]'); got 1: 0.1")  # fmt: skip
    msg = _error(["--orchestrator.gate.advantage-range", "0.1", "x"])
    assert "orchestrator.gate.advantage_range[1]: Input should be a valid number" in msg
    assert "(from --orchestrator.gate.advantage-range)" in msg
    msg = _error(["--orchestrator.gate.advantage-range", "0.9", "0.1"])  # the validator's own check still runs
    assert "advantage_range = [0.9, 0.1]: use 0 <= low < high" in msg


def test_help_shows_the_values_a_tuple_flag_takes():
    from prime_rl.config.help import render_help

    text = render_help(RLConfig, "rl", None, full=True)
    assert "--orchestrator.gate.advantage-range FLOAT FLOAT|None" in text
    assert "--orchestrator.reward-range FLOAT FLOAT" in text
    assert "TUPLE" not in text


@pytest.mark.parametrize("args,want", [
    (["--trainer.shared-prefix", "maybe"], "  --trainer.shared-prefix takes true or false, or no value "
     "(--trainer.shared-prefix alone = true, --no-trainer.shared-prefix = false; got 'maybe')"),
    (["--trainer.shared-prefix=maybe"], "  --trainer.shared-prefix takes true or false, or no value "
     "(--trainer.shared-prefix alone = true, --no-trainer.shared-prefix = false; got 'maybe')"),
    (["--trainer.shared-prefix", "2"], "got '2'"),
    (["--trainer.shared-prefix", "-1"], "got '-1'"),
    (["--no-trainer.shared-prefix", "false"],
     "  --no-trainer.shared-prefix takes no value (it sets trainer.shared-prefix to false; got 'false')"),
])  # fmt: skip
def test_a_word_after_a_boolean_flag_names_the_flag(args, want):
    msg = _error(args)
    assert want in msg and "Unrecognized" not in msg


def test_a_boolean_flag_takes_true_false_in_any_case_none_where_allowed_and_leaves_positionals_alone():
    assert parse_config(RLConfig, ["@", RL_TOML, "--trainer.shared-prefix", "False"]).trainer.shared_prefix is False
    assert parse_config(RLConfig, ["@", RL_TOML, "--trainer.shared-prefix", "TRUE"]).trainer.shared_prefix is True

    for given, want in ((["--inference.vllm.enforce-eager", "None"], None), (["--inference.vllm.enforce-eager=None"],
                        None), (["--inference.vllm.enforce-eager"], True)):  # fmt: skip
        assert parse_config(RLConfig, ["@", RL_TOML, "--inference.vllm.enforce-eager", "false", *given]
                            ).inference.vllm.enforce_eager is want  # fmt: skip
    assert "--inference.vllm.enforce-eager takes true, false or None, or no value" in _error(
        ["--inference.vllm.enforce-eager", "x"])  # fmt: skip

    class Toy(BaseConfig):
        out: str = ""
        flag: bool = False

    assert bind_args(Toy, ["--flag", "x"], ("out",)) == ["--flag", "--out", "x"]  # the word fills OUT
    with pytest.raises(ConfigError, match="--flag takes true or false"):
        bind_args(Toy, ["--flag", "x"])


@pytest.mark.parametrize("args,dry_run,clean", [
    (["--dry-run", "@", RL_TOML], True, False),
    (["--clean", "--dry-run", "@", RL_TOML], True, True),
    (["--no-clean", "@", RL_TOML, "--dry-run"], True, False),
    (["--dry-run", "@", RL_TOML, "--no-dry-run"], False, False),
])  # fmt: skip
def test_a_boolean_flag_before_an_at_file_is_set_and_the_file_read(args, dry_run, clean):
    # `--x @ file` is a section's "load this file into x"; for a boolean it is the flag, then the file
    cfg = parse_config(RLConfig, args)
    assert (cfg.dry_run, cfg.clean) == (dry_run, clean)
    assert cfg.orchestrator.train.source[0].name == "gridsim"  # the file was read


def test_bool_word_from_the_command_line_exits_2_without_traceback(tmp_path, capsys, monkeypatch):
    from prime_rl.cli.rl import main

    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as e:
        main(["--dry-run", "@", RL_TOML, "--trainer.shared-prefix", "maybe", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err and "--trainer.shared-prefix takes true or false" in err


def test_a_json_list_flag_that_does_not_parse_names_the_flag():
    msg = _error(["--orchestrator.train.source", '[{"name": "x",'])
    assert msg.startswith("  --orchestrator.train.source: not valid JSON (Expecting property name enclosed in double "
                          "quotes at character 15 of")  # fmt: skip
    msg = _error(["--orchestrator.gate.advantage-range", "[0.1, 0.9"])
    assert msg.startswith("  --orchestrator.gate.advantage-range: not valid JSON")


def test_an_indexed_flag_changes_the_list_a_json_flag_gave():
    items = [{"name": "mine", "env": {"kind": "builtin", "id": "reverse-text"}}]
    for given in (["--orchestrator.train.source", json.dumps(items)],
                  [f"--orchestrator.train.source={json.dumps(items)}"]):  # fmt: skip
        cfg = parse_config(RLConfig, ["@", RL_TOML, *given, "--orchestrator.train.source.0.env.agent.max-turns", "3"])
        (source,) = cfg.orchestrator.train.source
        assert (source.name, source.env.agent.max_turns) == ("mine", 3)  # not the file's `gridsim` item
    msg = _error(["--orchestrator.train.source", json.dumps(items), "--orchestrator.train.source.1.name", "x"])
    assert "has 1 item(s) (from --orchestrator.train.source), counted from 0; index 1 is past the end" in msg


@pytest.mark.parametrize("given", [
    ["--orchestrator.train.source[0].env.agent.max-turns", "3"],
    ["--orchestrator.train.source[0].env.agent.max-turns=3"],
    ["--orchestrator.train.source.0.env.agent.max-turns", "3"],
])  # fmt: skip
def test_a_list_items_index_in_brackets_is_the_dotted_index(given):
    # messages print a list item's field as `source[0].x`; the flag spelt so is accepted as `--source.0.x`
    cfg = parse_config(RLConfig, ["@", RL_TOML, *given])
    (source,) = cfg.orchestrator.train.source
    assert (source.name, source.env.agent.max_turns) == ("gridsim", 3)


def test_a_bracketed_flags_errors_name_it_as_typed_and_keep_the_index():
    msg = _error(["--orchestrator.train.source[0].group-sise", "4"])
    assert ("orchestrator.train.source[0].group_sise: unknown key (got '4') (from "
            "--orchestrator.train.source[0].group-sise); did you mean `orchestrator.train.source[0].group_size` "
            "(flag `--orchestrator.train.source.0.group-size`)?") in msg  # fmt: skip
    msg = _error(["--orchestrator.train.source[2].name", "x"])
    assert msg.startswith("  --orchestrator.train.source[2].name: `orchestrator.train.source` has 1 item(s)")
    msg = _error(["--orchestrator.train.source[0].group-size=x"])
    assert "group_size: Input should be a valid integer" in msg
    assert "(from --orchestrator.train.source[0].group-size)" in msg


def test_an_indexed_flag_reads_its_field_as_the_plain_flag_does(tmp_path):
    # a list field under a list item takes its values (or one JSON list), a boolean no value or true/false
    class Item(BaseConfig):
        name: str = ""
        tags: list[str] = []
        on: bool = False

    class Toy(BaseConfig):
        items: list[Item] = []

    f = tmp_path / "toy.toml"
    f.write_text('[[items]]\nname = "a"\n[[items]]\nname = "b"\n')
    cfg = parse_config(Toy, ["@", str(f), "--items[0].tags", "x", "y", "--items.1.on", "--items.1.tags", '["z"]'])
    assert [(i.name, i.tags, i.on) for i in cfg.items] == [("a", ["x", "y"], False), ("b", ["z"], True)]
    cfg = parse_config(Toy, ["@", str(f), "--items.0.on", "TRUE", "--items[1].on=false"])
    assert [i.on for i in cfg.items] == [True, False]


def test_a_word_after_a_section_flag_names_the_flag():
    msg = _error(["--orchestrator.train.source.0.sampling", "hot"])
    assert msg.startswith("  --orchestrator.train.source.0.sampling is a table: set its fields "
                          "(--orchestrator.train.source.0.sampling.FIELD VALUE), or give it one JSON object "
                          "(--orchestrator.train.source.0.sampling '{\"FIELD\": VALUE}'); got 'hot'")  # fmt: skip
    assert _error(["--orchestrator.train.sampling", "hot"]).startswith("  --orchestrator.train.sampling is a table")


@pytest.mark.parametrize("table,dotted", [
    (["--orchestrator.train.source.0.sampling", '{"temperature": 0.7}'],
     ["--orchestrator.train.source.0.sampling.temperature", "0.7"]),
    (["--orchestrator.train.source[0]", '{"group_size": 2, "env": {"agent": {"max_turns": 2}}}'],
     ["--orchestrator.train.source.0.group-size", "2", "--orchestrator.train.source.0.env.agent.max-turns", "2"]),
    (["--orchestrator.train.sampling", '{"temperature": 0.5, "max_completion_tokens": 32}'],
     ["--orchestrator.train.sampling.temperature", "0.5", "--orchestrator.train.sampling.max-completion-tokens", "32"]),
    (["--wandb", '{"offline": true, "name": "-x"}'], ["--wandb.offline", "--wandb.name", "-x"]),
    (["--wandb", "{}"], ["--wandb"]),
    (['--orchestrator.train.sampling={"temperature": 0.3}'], ["--orchestrator.train.sampling.temperature", "0.3"]),
    # grpo: rl.toml's global std_normalize = true must act on the source (with rloo or maxrl it would act on none)
    (["--orchestrator.train.source[0].advantage", '{"type": "grpo", "filter_zero": true}'],
     ["--orchestrator.train.source.0.advantage.type", "grpo", "--orchestrator.train.source.0.advantage.filter-zero"]),
    (["--orchestrator.train.source.0.advantage", "grpo"], ["--orchestrator.train.source.0.advantage.type", "grpo"]),
])  # fmt: skip
def test_a_json_object_for_a_table_is_its_dotted_flags(table, dotted):
    # merged into the table the file gives, as the dotted flags are
    got, want = (parse_config(RLConfig, ["@", RL_TOML, *args]) for args in (table, dotted))
    assert got.model_dump() == want.model_dump()
    assert got.model_dump() != parse_config(RLConfig, ["@", RL_TOML]).model_dump()


def test_a_json_object_for_sfts_validation_data():
    from prime_rl.config.trainer import SFTConfig

    sft = str(REPO / "examples/reverse_text/sft.toml")
    cfg = parse_config(SFTConfig, ["@", sft, "--val.data", '{"path": "val_dir", "split": "test"}'])
    assert (cfg.val.data.path, cfg.val.data.split, cfg.val.interval) == (Path("val_dir"), "test", 50)
    cfg = parse_config(SFTConfig, ["@", sft, "--val", '{"data": {"path": "v.jsonl"}, "interval": 5}'])
    assert (cfg.val.data.path, cfg.val.interval) == (Path("v.jsonl"), 5)


def test_switching_a_files_validation_data_to_a_fraction_says_and_takes_val_data_none(tmp_path):
    """A file sets [val.data]; `--val.fraction` alone is refused with the flag that unsets val.data, which works."""
    from prime_rl.config.trainer import SFTConfig

    sft = tmp_path / "sft.toml"
    sft.write_text('[val]\ndata.path = "val.jsonl"\n')
    with pytest.raises(ConfigError) as err:
        parse_config(SFTConfig, ["@", str(sft), "--val.fraction", "0.1"])
    assert "[val] sets both val.data and val.fraction" in str(err.value)
    assert "`--val.data None` unsets a val.data that a file sets" in str(err.value)
    cfg = parse_config(SFTConfig, ["@", str(sft), "--val.data", "None", "--val.fraction", "0.1"])
    assert (cfg.val.data, cfg.val.fraction) == (None, 0.1)
    sft.write_text("[val]\nfraction = 0.1\n")
    cfg = parse_config(SFTConfig, ["@", str(sft), "--val.fraction", "None", "--val.data.path", "v.jsonl"])
    assert (cfg.val.data.path, cfg.val.fraction) == (Path("v.jsonl"), None)


@pytest.mark.parametrize("args,want", [
    (["--orchestrator.train.source.0.sampling", '{"temprature": 0.7}'],
     "  orchestrator.train.source[0].sampling.temprature: unknown key (got '0.7') (from "
     "--orchestrator.train.source.0.sampling); did you mean `orchestrator.train.source[0].sampling.temperature`"),
    (["--orchestrator.train.source[0].sampling", '{"temperature": "hot"}'],
     "sampling.temperature: Input should be a valid number, unable to parse string as a number (got 'hot') "
     "(from --orchestrator.train.source[0].sampling)"),
    (["--orchestrator.train.source.0.sampling", '{"temperature": 0.7'],
     "  --orchestrator.train.source.0.sampling: not valid JSON (Expecting ',' delimiter at character 20); a table "
     "takes one JSON object in single quotes for the shell, with its texts in double quotes "
     "(--orchestrator.train.source.0.sampling '{\"FIELD\": VALUE}'), or set each field: "
     "--orchestrator.train.source.0.sampling.FIELD VALUE"),
])  # fmt: skip
def test_a_json_object_for_a_table_names_the_flag_in_its_errors(args, want):
    assert want in _error(args)
