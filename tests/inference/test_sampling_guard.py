"""vLLM options that change the sampled distribution are refused in `inference.vllm.extra_args` under every
spelling vLLM's argument parser accepts (underscores or dashes, with or without `--`, `=value` forms, upper case,
or smuggled in a list value), by `rl` always and by the standalone `inference` command unless
`vllm.allow_distribution_changes` says the server only serves evals (docs/design.md invariant 9)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from prime_rl.config.inference import InferenceConfig, flag_name
from prime_rl.config.rl import RLConfig
from prime_rl.inference.server import build_vllm_args

SPELLINGS = [
    {"logits_processors": "my.mod:Proc"},
    {"logits-processors": "my.mod:Proc"},
    {"--logits-processors": "my.mod:Proc"},
    {"--logits_processors": "my.mod:Proc"},
    {"--logits-processors=my.mod:Proc": True},
    {"--logits_processors=my.mod:Proc": True},
    {"LOGITS_PROCESSORS": "my.mod:Proc"},
    {"max-num-seqs": ["4", "--logits_processors", "my.mod:Proc"]},
    {"override_generation_config": '{"top_p": 0.5}'},
    {"--override-generation-config={\"min_p\": 0.1}": True},
    {"generation_config": "auto"},
    {"--logprobs_mode": "raw_logprobs"},
    {"top_p": 0.5},
    {"--top-k": 5},
    {"min_p": 0.1},
    {"repetition-penalty": 1.2},
    {"presence_penalty": 0.5},
    {"--frequency_penalty=0.5": True},
]


def _key(extra: dict) -> str:
    return next(iter(extra))


RL_FIX = "rl trains on what this server samples, so it refuses the option whatever allow_distribution_changes says: remove it"


@pytest.mark.parametrize("extra", SPELLINGS, ids=_key)
def test_rl_refuses_every_spelling(extra):
    """Under rl the fix offered is the one that works (remove it), with or without the standalone server's
    eval-only escape hatch, which does not open training."""
    for vllm in ({"extra_args": extra}, {"extra_args": extra, "allow_distribution_changes": True}):
        with pytest.raises(ValidationError) as e:
            RLConfig(inference={"vllm": vllm})
        msg = e.value.errors()[0]["msg"]
        assert msg.startswith("Value error, extra_args '") and msg.endswith(RL_FIX), msg
        assert "changes the sampled distribution" in msg
        assert "allow_distribution_changes = true" not in msg


def test_rl_command_offers_a_fix_that_works(tmp_path):
    """The sequence a user follows on the command line: the first refusal names the option and says to remove it
    (it offered allow_distribution_changes, which rl then refused too); the flag is refused with the same fix;
    without the option the config parses."""
    demo = Path(__file__).resolve().parents[2] / "examples/gridsim/rl.toml"
    rl = [str(Path(sys.executable).parent / "rl"), "@", str(demo), "--output-dir", str(tmp_path / "run")]
    option = ["--inference.vllm.extra-args", '{"top_p": 0.9}']
    for extra in ([], ["--inference.vllm.allow-distribution-changes"]):
        r = subprocess.run([*rl, *option, *extra, "--dry-run"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == "rl: config error" and len(lines) == 2, r.stderr
        assert lines[1].startswith("  inference.vllm: extra_args 'top_p' changes the sampled distribution"), r.stderr
        assert f"{RL_FIX} (from " in lines[1] and "allow_distribution_changes = true" not in lines[1], r.stderr
    from prime_rl.config.loader import parse_config

    assert parse_config(RLConfig, ["@", str(demo)]).inference.vllm.extra_args == {}  # removed: accepted


@pytest.mark.parametrize("extra", SPELLINGS, ids=_key)
def test_standalone_inference_refuses_every_spelling_unless_allowed(extra):
    with pytest.raises(ValidationError, match=r"vllm.extra_args: .* vllm.allow_distribution_changes = true"):
        InferenceConfig(vllm={"extra_args": extra})
    cfg = InferenceConfig(vllm={"extra_args": extra, "allow_distribution_changes": True})
    assert cfg.vllm.extra_args == extra


def test_other_options_pass_and_reach_vllm():
    extra = {"max_num_batched_tokens": 4096, "--disable-log-stats": True, "--max-logprobs=5": True,
             "logits-processor-pattern": "my\\..*"}  # fmt: skip
    cfg = InferenceConfig(vllm={"extra_args": extra})
    RLConfig(inference={"vllm": {"extra_args": extra}})
    args = build_vllm_args(cfg, cpu=True)
    assert args[-6:] == ["--max-num-batched-tokens", "4096", "--disable-log-stats", "--max-logprobs=5",
                         "--logits-processor-pattern", "my\\..*"]  # fmt: skip


def test_flag_name():
    assert flag_name("--Logits_Processors=a=b") == "logits-processors"
    assert flag_name("top_p") == "top-p"
    assert flag_name("-x") == "x"


def test_inference_command_exits_2_naming_the_option(tmp_path):
    toml = tmp_path / "inference.toml"
    toml.write_text('[vllm.extra_args]\n"--logits_processors" = "my.mod:Proc"\n')
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.inference", "@", str(toml), "--output-dir",
                        str(tmp_path / "out"), "--dry-run"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "'--logits_processors' changes the sampled distribution" in r.stderr
    assert "Traceback" not in r.stderr
