"""Where a config error says a value came from (`loader.format_validation_error`): a section's problem whose message
names its fields names the flags or files that set those fields, not every flag under the section nor a file that
holds the section without them; a problem of the shared `[ckpt]` that `rl` copies into `trainer.ckpt` and
`orchestrator.ckpt` is said once."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.rl import RLConfig


def error(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, argv)
    return str(e.value)


def toml(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_a_shared_ckpt_problem_is_said_once_with_the_flag_that_set_the_field(tmp_path):
    other = toml(tmp_path, "other.toml", "[ckpt]\ninterval = 2\nkeep_last = 3\n")
    msg = error(["@", other, "--ckpt.resume-dir", "x/checkpoints/foo", "--ckpt.keep-last", "4"])
    lines = [ln for ln in msg.splitlines() if "not a checkpoint folder" in ln]
    assert len(lines) == 1 and lines[0].startswith("  ckpt: ckpt.resume_dir = 'x/checkpoints/foo'"), msg
    assert lines[0].endswith("(from --ckpt.resume-dir)")  # not --ckpt.keep-last, nor other.toml
    assert "keep-last" not in msg and other not in msg


def test_the_file_that_set_the_field_is_named_not_unrelated_flags(tmp_path):
    fork = toml(tmp_path, "fork.toml", '[ckpt]\ninterval = 2\nresume_dir = "x/checkpoints/foo"\n')
    msg = error(["@", fork, "--ckpt.keep-last", "4"])
    assert msg.count("not a checkpoint folder") == 1 and msg.endswith(f"(in {fork})"), msg


def test_fields_set_in_different_places_are_named_each(tmp_path):
    fork = toml(tmp_path, "fork.toml", '[ckpt]\nresume_dir = "x/checkpoints/step_2"\n')
    step = toml(tmp_path, "step.toml", "[ckpt]\nresume_step = 2\n")
    msg = error(["@", fork, "@", step])
    assert msg.count("both set") == 1, msg
    assert msg.endswith(f"(ckpt.resume_dir in {fork}, ckpt.resume_step in {step})")
    msg = error(["@", fork, "--ckpt.resume-step", "2"])
    assert msg.endswith(f"(ckpt.resume_dir in {fork}, ckpt.resume_step from --ckpt.resume-step)")


def test_a_nested_field_named_by_a_sections_problem_names_its_own_flag(tmp_path):
    trains = toml(tmp_path, "train.toml", "[orchestrator.train]\ngroup_size = 4\n")
    msg = error(["@", trains, "--orchestrator.train.sampling.temperature", "0.7",
                 "--orchestrator.train.sampling.top-p", "0.9"])  # fmt: skip
    assert "train.sampling.top_p = 0.9 truncates" in msg
    assert msg.endswith("(from --orchestrator.train.sampling.top-p)"), msg  # not the temperature flag, nor the file


def test_an_item_of_a_list_given_by_a_json_flag_names_the_flag_not_the_file():
    rl_toml = str(Path(__file__).resolve().parents[1] / "examples/gridsim/rl.toml")  # its [[orchestrator.train.source]] sets env.agent.max_turns = 4
    items = '[{"name": "a", "env": {"kind": "builtin", "id": "reverse-text", "agent": {"max_turns": "x"}}, "wieght": 1}]'
    msg = error(["@", rl_toml, "--orchestrator.train.source", items])
    assert "orchestrator.train.source[0].env.agent.max_turns: Input should be a valid integer" in msg
    assert "(got 'x') (from --orchestrator.train.source)" in msg and rl_toml not in msg, msg
    assert "orchestrator.train.source[0].wieght: unknown key (got 1) (from --orchestrator.train.source)" in msg


@pytest.mark.parametrize("dotted", ["data.source.1.path", "data.source[1].path"])
def test_where_set_finds_a_list_entrys_field_in_the_file_that_set_it(tmp_path, dotted):
    from prime_rl.config.loader import where_set
    from prime_rl.config.trainer import SFTConfig

    cfg = toml(tmp_path, "sft.toml", '[[data.source]]\npath = "a.jsonl"\n[[data.source]]\npath = "b.jsonl"\n')
    parse_config(SFTConfig, ["@", cfg, "--max-steps", "3"])
    assert where_set(dotted) == f" (in {cfg})"
    assert where_set("data.source.2.path") == ""  # no such entry in the file
    assert where_set("max_steps") == " (from --max-steps)"


def test_a_sections_problem_naming_its_field_bare_names_where_that_field_was_set(tmp_path):
    """`orchestrator.gate`'s refusal says `advantage_range = [...]` without the section's name: the flag that set
    advantage_range is named, not a file that holds [orchestrator.gate] without it."""
    gate = toml(tmp_path, "gate.toml", "[orchestrator.gate]\nreject_uniform = true\n")
    msg = error(["@", gate, "--orchestrator.gate.advantage-range", "[0.5, 0.2]"])
    assert msg.strip() == ("orchestrator.gate: advantage_range = [0.5, 0.2]: use 0 <= low < high (bounds on "
                           "|advantage|) (from --orchestrator.gate.advantage-range)"), msg
    ranged = toml(tmp_path, "range.toml", "[orchestrator.gate]\nadvantage_range = [0.5, 0.2]\n")
    assert error(["@", ranged, "--orchestrator.gate.reject-uniform"]).endswith(f"(in {ranged})")


def test_a_whole_config_problem_names_where_its_fields_were_set(tmp_path):
    """A check of the whole rl config (no section of its own) names the flags or files that set the fields its
    message names, instead of nothing."""
    run = toml(tmp_path, "run.toml", "[inference.vllm]\nmax_model_len = 100\n")
    msg = error(["@", run, "--seq-len", "512"])
    assert "is above inference.vllm.max_model_len = 100" in msg
    assert msg.endswith(f"(seq_len from --seq-len, inference.vllm.max_model_len in {run})"), msg
    msg = error(["--weight-transport.type", "collective", "--inference.vllm.data-parallel-size", "2"])
    assert msg.endswith("(weight_transport.type from --weight-transport.type, inference.vllm.data_parallel_size "
                        "from --inference.vllm.data-parallel-size)"), msg


def test_a_sections_problem_naming_a_path_below_it_names_where_each_was_set(tmp_path):
    """The orchestrator's batch-size check says `train.group_size` (below [orchestrator]) and `batch_size`: under rl
    the file that set the group size and the flag that set the batch size are both named."""
    run = toml(tmp_path, "run.toml", "[orchestrator.train]\ngroup_size = 4\n")
    msg = error(["@", run, "--orchestrator.batch-size", "7"])
    assert "batch_size (7) must be a multiple of train.group_size (4)" in msg
    assert msg.endswith(f"(orchestrator.train.group_size in {run}, orchestrator.batch_size from "
                        "--orchestrator.batch-size)"), msg


def test_a_no_flag_is_named_as_where_its_field_was_set_like_the_flag_given_false(tmp_path):
    """`--no-x` records its origin as `--x false` does: a where_set-dependent warning or refusal names it."""
    from prime_rl.config.loader import where_set
    from prime_rl.config.recipes import inert_recipe_settings
    from prime_rl.config.trainer import SFTConfig

    gate = toml(tmp_path, "gate.toml", "[orchestrator.gate]\nreject_uniform = true\nmax_resample_factor = 2.0\n")
    for off, typed in ((["--orchestrator.gate.reject-uniform", "false"], "--orchestrator.gate.reject-uniform"),
                       (["--no-orchestrator.gate.reject-uniform"], "--no-orchestrator.gate.reject-uniform")):  # fmt: skip
        cfg = parse_config(RLConfig, ["@", gate, *off])
        assert cfg.orchestrator.gate.reject_uniform is False
        assert where_set("orchestrator.gate.reject_uniform") == f" (from {typed})"
        warned = inert_recipe_settings(cfg.orchestrator, lambda f: where_set(f"orchestrator.{f}"))
        assert [fields for fields, _ in warned] == [["gate.max_resample_factor"]], typed
    msg = error(["--trainer.loss.ref-kl-coef", "0.1", "--no-orchestrator.gate.keep-for-kl"])
    assert "`orchestrator.gate.keep_for_kl = false`" in msg and "(from --no-orchestrator.gate.keep-for-kl)" in msg
    parse_config(SFTConfig, ["--no-data.loss-mask.assistant", "--data.loss-mask.user"])
    assert where_set("data.loss_mask.assistant") == " (from --no-data.loss-mask.assistant)"
