"""Tagged unions in the config: an environment is a built-in one or a remote taskset, a taskset NeMo Gym rows or a
verifiers taskset, each kind with only its own settings; configs in the older shape (no `kind` written) parse into
them, the tag inferred from the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, config_to_toml, parse_config
from prime_rl.config.orchestrator import (
    BuiltinEnvConfig,
    NemoGymTasksetConfig,
    OrchestratorConfig,
    TasksetEnvConfig,
    VerifiersTasksetConfig,
)
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[1]


def test_the_reference_seed_config_is_a_remote_nemo_gym_taskset():
    cfg = parse_config(RLConfig, ["@", str(REPO / "examples" / "gridsim" / "seed.toml")])
    env = cfg.orchestrator.train.source[0].env
    assert isinstance(env, TasksetEnvConfig) and env.kind == "remote"
    assert isinstance(env.taskset, NemoGymTasksetConfig) and env.taskset.kind == "nemo-gym"
    assert env.id is None and env.args == {}  # a remote taskset names no built-in environment


def test_builtin_and_verifiers_shapes(tmp_path):
    toml = tmp_path / "o.toml"
    toml.write_text('[[train.source]]\nname = "a"\nenv.id = "reverse-text"\nenv.args = {n = 3}\n'
                    '[[train.source]]\nname = "b"\nenv.taskset.id = "my-taskset"\nenv.taskset.args = {k = 1}\n')
    cfg = parse_config(OrchestratorConfig, ["@", str(toml)])
    a, b = (s.env for s in cfg.train.source)
    assert isinstance(a, BuiltinEnvConfig) and (a.id, a.args, a.taskset) == ("reverse-text", {"n": 3}, None)
    assert isinstance(b.taskset, VerifiersTasksetConfig) and (b.taskset.id, b.taskset.args) == ("my-taskset", {"k": 1})
    assert isinstance(OrchestratorConfig().train.source[0].env, BuiltinEnvConfig)  # the default: gridsim
    out = tmp_path / "resolved.toml"  # the written tags read back
    out.write_text(config_to_toml(cfg))
    assert parse_config(OrchestratorConfig, ["@", str(out)]) == cfg


def test_every_example_config_parses_with_its_env_kinds():
    """examples/**/*.toml that are rl configs parse, each source's env a tagged kind."""
    seen = 0
    for path in sorted(REPO.glob("examples/**/*.toml")):
        text = path.read_text()
        if "[[orchestrator.train.source]]" not in text and "orchestrator.train.source" not in text:
            continue
        cfg = parse_config(RLConfig, ["@", str(path)])
        for src in cfg.orchestrator.train.source + (cfg.orchestrator.eval.source or []):
            assert src.env.kind in ("builtin", "remote"), path
        seen += 1
    assert seen >= 3


@pytest.mark.parametrize("env,message", [
    ('env.id = "gridsim"\nenv.taskset.dataset = "x.jsonl"', "set exactly one of `env.id`"),
    ("env.agent.max_turns = 3", "set exactly one of `env.id`"),
    ('env.taskset.id = "my"\nenv.taskset.dataset = "x.jsonl"', "env.taskset.dataset does not apply to taskset id 'my'"),
    ('env.taskset.dataset = "x.jsonl"\nenv.taskset.args = {n = 1}', "configure a verifiers taskset"),
    ('env.taskset.id = "my"\nenv.taskset.stuff = 1', "env.taskset.kind = 'verifiers' (inferred from the section's"),
])  # fmt: skip
def test_wrong_shapes_name_the_field_and_the_fix(tmp_path, env, message):
    toml = tmp_path / "o.toml"
    toml.write_text(f"[[train.source]]\n{env}\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("`", "`")):
        parse_config(OrchestratorConfig, ["@", str(toml)])
