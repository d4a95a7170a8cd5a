"""The "did you mean" hint of an unknown key: a misspelt section suggests the full flag, and the reference
prime-rl's `[orchestrator.sampling]` names `[orchestrator.train.sampling]`."""

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.rl import RLConfig


def _error(args: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, args)
    return str(e.value)


def test_misspelt_section_suggests_the_full_flag():
    msg = _error(["--orchestrater.batch-size", "4"])
    assert "did you mean `orchestrator.batch_size` (flag `--orchestrator.batch-size`)?" in msg
    assert "flag `--orchestrator`)" not in msg


def test_misspelt_section_in_a_file_suggests_the_full_key(tmp_path):
    f = tmp_path / "typo.toml"
    f.write_text("[orchestrater]\nbatch_size = 4\n")
    assert "did you mean `orchestrator.batch_size` (flag `--orchestrator.batch-size`)?" in _error(["@", str(f)])


def test_reference_sampling_section_names_ours():
    msg = _error(["--orchestrator.sampling.temperature", "0.5"])
    assert "orchestrator.sampling: unknown key (from --orchestrator.sampling.temperature)" in msg
    assert "the reference prime-rl's `orchestrator.sampling` is `orchestrator.train.sampling` here" in msg
    assert "(flag `--orchestrator.train.sampling.temperature`)" in msg


@pytest.mark.parametrize("cls,flag,want", [
    ("rl", "--trainer.optim.learning-rate", "did you mean `trainer.optim.lr` (flag `--trainer.optim.lr`)?"),
    ("sft", "--optim.learning-rate", "did you mean `optim.lr` (flag `--optim.lr`)?"),
])
def test_other_frameworks_learning_rate_names_lr(cls, flag, want):
    from prime_rl.config.trainer import SFTConfig

    with pytest.raises(ConfigError) as e:
        parse_config({"rl": RLConfig, "sft": SFTConfig}[cls], [flag, "1e-5"])
    assert "other frameworks' `optim.learning_rate` is `optim.lr` here: " + want in str(e.value)
