"""Refusals name the one place that set what they complain about, and the fix: the `type = "custom"` that requires
an advantage's import_path (and the key to add in that file), the curriculum's window, an eval source's
train-only or per-source setting given by a flag over a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[1]
RL_TOML = str(REPO / "examples/reverse_text/rl.toml")
EVAL_TOML = str(REPO / "examples/reverse_text/eval.toml")


def _error(cls, args: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(cls, args)
    return str(e.value)


def test_a_custom_advantage_without_import_path_names_the_file_that_set_the_type_and_the_key(tmp_path):
    f = tmp_path / "adv.toml"
    f.write_text('[[orchestrator.train.source]]\nname = "r"\nenv.id = "reverse-text"\nadvantage = { type = "custom" }\n')
    msg = _error(RLConfig, ["@", RL_TOML, "@", str(f)])
    assert ('orchestrator.train.source[0].advantage.import_path: required by `orchestrator.train.source[0].advantage.'
            f'type = "custom"` (in {f}), not given: add `import_path = "..."` next to `type = "custom"` in {f}, or '
            "pass --orchestrator.train.source.0.advantage.import-path STR") in msg
    msg = _error(RLConfig, ["@", RL_TOML, "--orchestrator.advantage.type", "custom"])
    assert ('orchestrator.advantage.import_path: required by `orchestrator.advantage.type = "custom"` (from '
            "--orchestrator.advantage.type), not given: pass --orchestrator.advantage.import-path STR") in msg


def test_curriculum_min_rollouts_above_window_gives_the_fix():
    msg = _error(RLConfig, ["@", RL_TOML, "--orchestrator.curriculum.sampler", "difficulty_pool",
                            "--orchestrator.curriculum.min-rollouts", "8", "--orchestrator.curriculum.window", "4"])
    assert ("curriculum.min_rollouts (8) is above curriculum.window (4): a task would never hold min_rollouts "
            "rollouts in its window of the last 4, so none would count as easy or hard; lower "
            "curriculum.min_rollouts to 4 or less, or raise curriculum.window to 8 or more") in msg


def test_an_eval_sources_refusal_names_the_flag_or_the_file_not_both(tmp_path):
    msg = _error(EvalCommandConfig, ["@", EVAL_TOML, "--eval.source.0.group-size", "2"])
    assert ("eval.source: `source.0.group_size = 2` (from --eval.source.0.group-size) is a train-source setting: "
            "eval plays rollouts_per_example rollouts per task") in msg
    assert ", or in " not in msg
    f = tmp_path / "eval.toml"
    f.write_text('[[eval.source]]\nname = "x"\nenv.id = "reverse-text"\ngroup_size = 3\n')
    assert f"`source.0.group_size = 3` (in {f}) is a train-source setting" in _error(EvalCommandConfig, ["@", str(f)])
    msg = _error(EvalCommandConfig, ["@", EVAL_TOML, "--eval.source.0.interval", "5"])
    assert msg.startswith("  eval: eval.source.0.interval is set: evals evaluates every source once per model")
    assert msg.endswith("(from --eval.source.0.interval)")
