"""vLLM options that change the sampled distribution are refused in `inference.vllm.extra_args` under every
spelling vLLM's argument parser accepts (underscores or dashes, with or without `--`, `=value` forms, upper case,
or smuggled in a list value), by `rl` always and by the standalone `inference` command unless
`vllm.allow_distribution_changes` says the server only serves evals (docs/design.md invariant 9)."""

from __future__ import annotations

import subprocess
import sys

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


@pytest.mark.parametrize("extra", SPELLINGS, ids=_key)
def test_rl_refuses_every_spelling(extra):
    with pytest.raises(ValidationError, match="changes the sampled distribution"):
        RLConfig(inference={"vllm": {"extra_args": extra}})
    # the eval-only escape hatch of the standalone server does not open training
    with pytest.raises(ValidationError, match=r"inference.vllm.extra_args: .* training refuses it even with"):
        RLConfig(inference={"vllm": {"extra_args": extra, "allow_distribution_changes": True}})


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
