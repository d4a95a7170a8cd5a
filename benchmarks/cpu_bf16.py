"""bf16 against fp32 on this CPU, side by side in one run: speed (as bf16/fp32 ratios) and logprob parity.

1. Host: the matmul GFLOP/s of both dtypes (`prime_rl.cpu_bf16.matmul_gflops`, n = 1024) and what `dtype = "auto"`
   decides here (`cpu_bf16.check`, run regardless of PRIME_RL_CPU_BF16).
2. Per dtype, one vLLM server (`--dtype` float32, then bfloat16): decode tokens/s of `--seqs` concurrent requests
   of `--decode-tokens` tokens each (`ignore_eos`, one warm-up request first), and `--prompts` seeded completions of
   reverse-text prompts (the model's own template) at T = 1 with vLLM's sampled-token logprobs.
3. Per dtype, the trainer's model path (`trainer.model.load_model` with `model.dtype`: bf16 compute with fp32 master
   weights and reductions through FSDP2's MixedPrecisionPolicy; `trainer.logprobs.compute_logprobs`): the
   logprobs of the same tokens, and the step time (forward + backward + AdamW step on one packed micro-batch of
   all sampled sequences; median of `--steps` after one warm-up step).

Parity rows, over the sampled completion tokens (log r = trainer - vLLM; mismatch KL = mean(r - log r - 1), the k3
estimator the loss reports as `mismatch_kl`):
   fp32 run   trainer fp32 vs vLLM fp32 on vLLM fp32's tokens
   bf16 run   trainer bf16 vs vLLM bf16 on vLLM bf16's tokens (what a bf16 run trains with)
   bf16/fp32  trainer bf16 vs trainer fp32 on vLLM fp32's tokens (bf16 rounding of the trainer alone)

Usage (starts vLLM twice: run it alone on the machine):
    python benchmarks/cpu_bf16.py [--model tiny|PATH] [--prompts 8] [--max-tokens 40] [--seqs 8]
        [--decode-tokens 64] [--steps 3] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

DTYPES = ("float32", "bfloat16")


def model_path(name: str) -> Path:
    """`tiny` -> the cached tiny Qwen3 test model; anything else is a local model folder."""
    if name == "tiny":
        from prime_rl.models.tiny import cached_tiny_model

        return cached_tiny_model()
    return Path(name).expanduser().resolve()


def reverse_text_prompts(model_dir: Path, n: int) -> list[list[int]]:
    """`n` reverse-text eval prompts rendered with the model's template (`renderer.name = auto`)."""
    from prime_rl.envs.reverse_text.env import ReverseTextEnv
    from prime_rl.models.renderer import load_tokenizer, make_renderer

    r = make_renderer(load_tokenizer(model_dir), "auto")
    return [list(r.render_ids(t.messages, add_generation_prompt=True)) for t in ReverseTextEnv(num_eval=n).tasks("eval")]


async def _decode_rate(base_url: str, model: str, prompt: list[int], seqs: int, tokens: int) -> float:
    """Completion tokens per second of `seqs` concurrent `/v1/completions` requests of exactly `tokens` tokens."""
    import httpx

    def body(i: int, n: int) -> dict[str, Any]:
        return {"model": model, "prompt": prompt, "max_tokens": n, "ignore_eos": True, "temperature": 1.0, "seed": i}

    async with httpx.AsyncClient(base_url=base_url, timeout=600) as c:
        (await c.post("/v1/completions", json=body(0, 4))).raise_for_status()  # warm-up
        t0 = time.perf_counter()
        res = await asyncio.gather(*(c.post("/v1/completions", json=body(i, tokens)) for i in range(seqs)))
        wall = time.perf_counter() - t0
    done = 0
    for r in res:
        r.raise_for_status()
        done += r.json()["usage"]["completion_tokens"]
    return done / wall


async def _sample(base_url: str, prompts: list[list[int]], max_tokens: int):
    from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
    from prime_rl.inference.client import InferenceClient

    async with InferenceClient(ClientConfig(base_url=[base_url], max_retries=1)) as c:
        return await asyncio.gather(*(
            c.generate(p, SamplingConfig(temperature=1.0, max_completion_tokens=max_tokens, seed=i))
            for i, p in enumerate(prompts)
        ))  # fmt: skip


def run_vllm(model_dir: Path, dtype: str, prompts: list[list[int]], args) -> dict[str, Any]:
    """Start vLLM in `dtype`, measure decode tokens/s and sample the parity completions; the server is stopped."""
    from prime_rl.inference.testing import start_server

    with start_server(model_dir, dtype=dtype, max_model_len=1024, health_timeout_s=900) as srv:
        rate = asyncio.run(_decode_rate(srv.base_url, str(model_dir), prompts[0], args.seqs, args.decode_tokens))
        res = asyncio.run(_sample(srv.base_url, prompts, args.max_tokens))
    samples = [(p, r.completion_ids, np.asarray(r.logprobs, dtype=np.float64)) for p, r in zip(prompts, res, strict=True)]
    return {"decode_tok_s": rate, "samples": samples}


def load_trainer_model(model_dir: Path, dtype: str):
    """The trainer's model (`load_model`, lone process) with `model.dtype = dtype`."""
    from prime_rl.config.trainer import TrainerModelConfig
    from prime_rl.trainer.dist import init_distributed
    from prime_rl.trainer.model import load_model

    return load_model(TrainerModelConfig(name=str(model_dir), dtype=dtype), init_distributed())


def packed(samples) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """All samples in one packed micro-batch: input ids [T], position ids [T], each completion's (start, end)."""
    ids, pos, spans, at = [], [], [], 0
    for p, c, _ in samples:
        ids += list(p) + list(c)
        pos += list(range(len(p) + len(c)))
        spans.append((at + len(p), at + len(p) + len(c)))
        at += len(p) + len(c)
    return torch.tensor(ids), torch.tensor(pos), spans


def trainer_logprobs(model, samples) -> np.ndarray:
    """The trainer's logprobs of every completion token of `samples`, concatenated (float64)."""
    from prime_rl.trainer.logprobs import compute_logprobs

    ids, pos, spans = packed(samples)
    with torch.no_grad():
        lp, _ = compute_logprobs(model, ids, pos, torch.ones(len(ids)))
    return np.concatenate([lp[a:b].double().numpy() for a, b in spans])


def step_time(model, samples, steps: int) -> float:
    """Median seconds of forward + backward + AdamW step on the packed micro-batch (after one warm-up step)."""
    from prime_rl.trainer.logprobs import compute_logprobs

    ids, pos, spans = packed(samples)
    mask = torch.zeros(len(ids), dtype=torch.bool)
    for a, b in spans:
        mask[a:b] = True
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        lp, _ = compute_logprobs(model, ids, pos, torch.ones(len(ids)))
        (-(lp * mask).sum() / mask.sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def parity(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """max and mean |a - b| and the mismatch KL mean(r - log r - 1), log r = a - b (a: trainer, b: reference)."""
    d = a - b
    return {"tokens": int(len(d)), "max_abs": float(np.abs(d).max()), "mean_abs": float(np.abs(d).mean()),
            "mismatch_kl": float(np.mean(np.exp(d) - d - 1))}  # fmt: skip


def measure(model_dir: Path, args) -> dict[str, Any]:
    """Everything the module docstring lists, as one dict (GFLOP/s, tok/s, seconds, parity rows)."""
    from prime_rl.cpu_bf16 import check, matmul_gflops

    torch.set_num_threads(args.threads)
    fp32_gf, bf16_gf = matmul_gflops(size=1024, rounds=5)
    decision = check(environ={})
    out: dict[str, Any] = {"model": str(model_dir), "threads": args.threads,
                           "matmul_gflops": {"float32": fp32_gf, "bfloat16": bf16_gf},
                           "auto_decision": decision.describe()}  # fmt: skip
    prompts = reverse_text_prompts(model_dir, args.prompts)
    vllm = {d: run_vllm(model_dir, d, prompts, args) for d in DTYPES}
    models = {d: load_trainer_model(model_dir, d) for d in DTYPES}
    lp = {d: trainer_logprobs(models[d], vllm[d]["samples"]) for d in DTYPES}
    ref = {d: np.concatenate([s[2] for s in vllm[d]["samples"]]) for d in DTYPES}
    out["parity"] = {
        "fp32 run": parity(lp["float32"], ref["float32"]),
        "bf16 run": parity(lp["bfloat16"], ref["bfloat16"]),
        "bf16/fp32": parity(trainer_logprobs(models["bfloat16"], vllm["float32"]["samples"]), lp["float32"]),
    }
    out["decode_tok_s"] = {d: vllm[d]["decode_tok_s"] for d in DTYPES}
    out["step_s"] = {d: step_time(models[d], vllm["float32"]["samples"], args.steps) for d in DTYPES}
    out["step_tokens"] = len(packed(vllm["float32"]["samples"])[0])
    return out


def report(r: dict[str, Any]) -> str:
    """The side-by-side table (bf16/fp32 ratios: > 1 means bf16 is faster)."""
    g, t, s = r["matmul_gflops"], r["decode_tok_s"], r["step_s"]
    lines = [f"model {r['model']}, torch threads {r['threads']}", r["auto_decision"], "",
             f"{'':<28}{'float32':>12}{'bfloat16':>12}{'bf16/fp32':>12}",
             f"{'matmul GFLOP/s (n=1024)':<28}{g['float32']:>12.1f}{g['bfloat16']:>12.1f}{g['bfloat16'] / g['float32']:>12.2f}",
             f"{'vLLM decode tok/s':<28}{t['float32']:>12.1f}{t['bfloat16']:>12.1f}{t['bfloat16'] / t['float32']:>12.2f}",
             f"{'trainer step s (' + str(r['step_tokens']) + ' tok)':<28}{s['float32']:>12.3f}{s['bfloat16']:>12.3f}"
             f"{s['float32'] / s['bfloat16']:>12.2f}", "",
             f"{'parity (trainer vs ref)':<28}{'tokens':>8}{'max|d|':>12}{'mean|d|':>12}{'mismatch KL':>14}"]  # fmt: skip
    for name, p in r["parity"].items():
        lines.append(f"{name:<28}{p['tokens']:>8}{p['max_abs']:>12.2e}{p['mean_abs']:>12.2e}{p['mismatch_kl']:>14.2e}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny", help="tiny (the test model) or a local model folder")
    ap.add_argument("--prompts", type=int, default=8, help="parity completions (reverse-text prompts)")
    ap.add_argument("--max-tokens", type=int, default=40, help="tokens per parity completion at most")
    ap.add_argument("--seqs", type=int, default=8, help="concurrent decode requests")
    ap.add_argument("--decode-tokens", type=int, default=64, help="tokens per decode request (ignore_eos)")
    ap.add_argument("--steps", type=int, default=3, help="timed trainer steps per dtype")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the trainer and the matmul probe")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers as JSON here")
    args = ap.parse_args()
    r = measure(model_path(args.model), args)
    print(report(r))
    if args.json is not None:
        args.json.write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
