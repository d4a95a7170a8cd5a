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


def test_rl_runs_bf16_end_to_end_on_cpu(tmp_path):
    """`rl` with `model.dtype = bfloat16` on CPU: both processes' configs say bfloat16, the trainer publishes bf16
    weights that vLLM loads, and its first (on-policy) step's mismatch KL is within the tiny model's bound."""
    import subprocess
    import sys
    import tomllib

    from safetensors import safe_open

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.metrics import read_metrics
    from prime_rl.ports import free_port

    run = tmp_path / "run"
    port = free_port()
    cfg = tmp_path / "rl.toml"
    cfg.write_text(f"""
max_steps = 2
seq_len = 512
output_dir = "{run}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{cached_tiny_model()}"
dtype = "bfloat16"
[trainer]
seed = 0
[orchestrator]
batch_size = 8
max_async_level = 0
seed = 0
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 24
seed = 0
[[orchestrator.train.source]]
name = "reverse"
env.id = "reverse-text"
[inference.server]
port = {port}
""")
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.rl", "@", str(cfg)], capture_output=True, text=True,
                       timeout=900, cwd=REPO)  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    configs = {n: tomllib.loads((run / "configs" / f"{n}.toml").read_text()) for n in ("trainer", "inference")}
    assert configs["trainer"]["model"]["dtype"] == configs["inference"]["model"]["dtype"] == "bfloat16"
    rows = read_metrics(run, "trainer")
    assert [row["step"] for row in rows] == [1, 2]
    assert 0 <= rows[0]["mismatch_kl"] <= MISMATCH_KL, rows[0]
    published = sorted((run / "weights").glob("step_*/*.safetensors"))
    assert published
    with safe_open(str(published[-1]), "pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"BF16"}
