"""bf16 on CPU, end to end on the tiny Qwen3 model: vLLM serving in bfloat16 and the trainer computing in bfloat16
(fp32 master weights, FSDP2 mixed precision, fp32 logprobs) score the same sampled tokens within the bound
docs/trainer.md and docs/inference.md state. The measurement is `benchmarks/cpu_bf16.py`'s."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MAX_ABS = 0.02  # bound on max |trainer - vLLM| per token, both bf16 (docs/trainer.md, "Precision")
MISMATCH_KL = 1e-5  # bound on the mean k3 mismatch KL, both bf16


def bench():
    spec = importlib.util.spec_from_file_location("cpu_bf16_bench", REPO / "benchmarks" / "cpu_bf16.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Args:
    prompts, max_tokens, seqs, decode_tokens = 8, 40, 2, 8


def test_bf16_trainer_and_bf16_vllm_agree_within_the_documented_bound():
    b = bench()
    model = b.model_path("tiny")
    prompts = b.reverse_text_prompts(model, Args.prompts)
    samples = b.run_vllm(model, "bfloat16", prompts, Args)["samples"]
    ref = np.concatenate([s[2] for s in samples])
    same = b.parity(b.trainer_logprobs(b.load_trainer_model(model, "bfloat16"), samples), ref)
    print(f"bf16 trainer vs bf16 vLLM: {same}")
    assert same["tokens"] >= 200
    assert same["max_abs"] <= MAX_ABS and same["mismatch_kl"] <= MISMATCH_KL
    assert same["max_abs"] > 1e-5  # bf16 rounding shows: the server and the trainer did not run fp32

