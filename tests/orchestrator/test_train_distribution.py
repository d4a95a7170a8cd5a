"""Settings that would make vLLM sample from another distribution than the one the trainer scores are refused
for training (docs/design.md invariant 9): top-p/top-k truncation, raw logprobs, server-wide logits processors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from prime_rl.config.orchestrator import EvalConfig, OrchestratorConfig, TrainSamplingConfig
from prime_rl.config.rl import RLConfig


@pytest.mark.parametrize("field,value", [("top_p", 0.5), ("top_k", 5)])
def test_truncated_training_sampling_is_refused_with_the_reason(field, value):
    with pytest.raises(ValidationError, match=rf"train.sampling.{field} = {value} truncate.*renormalised.*1.00 without"):
        TrainSamplingConfig(sampling={field: value})
    with pytest.raises(ValidationError, match=f"train.sampling.{field}"):
        OrchestratorConfig(train={"sampling": {field: value}})
    TrainSamplingConfig(sampling={"top_p": 1.0, "top_k": -1, "temperature": 0.5})
    TrainSamplingConfig(sampling={"top_k": 0})  # 0 = off, as vLLM reads it
    assert EvalConfig(sampling={field: value}).sampling.model_dump()[field] == value  # eval may truncate


def test_refusal_quotes_the_ratio_docs_and_results_record():
    """The measured mean importance ratio at top_p 0.5 is one number in the refusal, docs/orchestrator.md and the
    results file the page links (tests/integration/test_smollm.py::test_top_p_biases_the_importance_ratio)."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    page = re.search(r"at top_p 0\.5 its mean is about (0\.\d+) instead of 1,\s+\[results\]\(([^)]+)\)",
                     (docs / "orchestrator.md").read_text())  # fmt: skip
    assert page is not None
    ratio, results = page.groups()
    assert f"| 0.5 | {ratio}" in (docs / results).read_text()  # the recorded number, rounded to the page's digits
    with pytest.raises(ValidationError) as refused:
        TrainSamplingConfig(sampling={"top_p": 0.5})
    assert f"mean ratio {ratio} at top_p 0.5" in str(refused.value)


def test_rl_refuses_raw_logprobs_and_logits_processors():
    with pytest.raises(ValidationError, match="logprobs_mode = 'raw_logprobs'.*processed_logprobs"):
        RLConfig(inference={"vllm": {"logprobs_mode": "raw_logprobs"}})
    with pytest.raises(ValidationError, match="extra_args 'logits_processors' changes the sampled distribution.*remove it"):
        RLConfig(inference={"vllm": {"extra_args": {"logits_processors": "my.mod:Proc"}}})
    RLConfig(inference={"vllm": {"extra_args": {"max_num_batched_tokens": 4096}}})


def test_rl_cli_names_the_field(tmp_path):
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.rl", "--orchestrator.train.sampling.top-p", "0.9",
                        "--output-dir", str(tmp_path), "--dry-run"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode != 0 and "top_p = 0.9" in r.stderr and "renormalised" in r.stderr
