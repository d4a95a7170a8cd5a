"""Every shipped example config parses with the config class of the command its README runs it with, alone or
layered as documented (a renamed or removed field in an example is a config error here, not a failed demo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.config.rl import RLConfig
from prime_rl.config.trainer import SFTConfig

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

# file stem prefix -> the command that runs it (README / docs); files layered over another are listed in LAYERED
COMMANDS = {"rl": RLConfig, "seed": RLConfig, "digit": RLConfig, "tool": RLConfig, "sft": SFTConfig,
            "eval": EvalCommandConfig}  # fmt: skip
LAYERED = {"reverse_text/rl_gym.toml": "reverse_text/rl.toml", "gridsim/rl_forward.toml": "gridsim/rl.toml"}


def _command(path: Path):
    stem = path.stem.removeprefix("smollm2_")
    if stem.endswith("_sft"):
        return SFTConfig
    return COMMANDS[stem.split("_")[0]]


def _files() -> list[str]:
    return sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.toml"))


def test_every_example_has_a_command():
    assert len(_files()) >= 10
    for rel in _files():
        _command(EXAMPLES / rel)  # KeyError names a new example without a command here


@pytest.mark.parametrize("rel", _files())
def test_example_config_parses(rel):
    path = EXAMPLES / rel
    argv = ["@", str(EXAMPLES / LAYERED[rel])] if rel in LAYERED else []
    cfg = parse_config(_command(path), [*argv, "@", str(path)])
    assert cfg is not None


def test_rl_gym_replaces_the_in_process_source():
    """rl_gym.toml over rl.toml: one train source, played through the NeMo Gym server that `rl` starts."""
    cfg = parse_config(RLConfig, ["@", str(EXAMPLES / "reverse_text/rl.toml"), "@",
                                  str(EXAMPLES / "reverse_text/rl_gym.toml")])  # fmt: skip
    sources = cfg.orchestrator.train.source
    assert len(sources) == 1
    assert sources[0].env.taskset.id == "nemo-gym"
    assert sources[0].env.taskset.task.resources_url == "http://127.0.0.1:9102"
    assert cfg.env_server is not None and cfg.env_server.env == "reverse-text"
