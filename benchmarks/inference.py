"""Sampled tokens per second: vLLM (prime-rl's server, token-in/token-out) vs transformers `generate`.

    python benchmarks/inference.py [--hidden 128 --layers 2 | --smollm2 | --model-dir DIR] [--requests 64 --tokens 128]

Same prompts (chat-template ids of 64 different user messages), same length (exactly --tokens sampled tokens per
request: eos ignored / min_new_tokens), temperature 1, fp32 on CPU. vLLM: all requests sent concurrently to one
server (started here, stopped before the transformers run so they don't share cores). transformers: one batched
`generate` call with left padding. Prints both rates and their ratio, measured in this run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path


def prompts(tok, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": f"Task {i}: reverse the word {'abcdefghij'[: 3 + i % 7]} please."}]
        ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


async def _vllm_round(base_url: str, ps: list[list[int]], tokens: int) -> tuple[int, float]:
    import httpx

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=256)) as h:

        async def one(p, i):
            body = {
                "token_ids": p,
                "sampling_params": {
                    "temperature": 1.0,
                    "max_tokens": tokens,
                    "ignore_eos": True,
                    "logprobs": 0,
                    "detokenize": False,
                    "seed": i,
                },
            }
            r = await h.post(base_url + "/inference/v1/generate", json=body)
            if r.status_code != 200:
                raise RuntimeError(f"vLLM answered {r.status_code}: {r.text[:2000]}")
            return len(r.json()["choices"][0]["token_ids"])

        t = time.perf_counter()
        counts = await asyncio.gather(*(one(p, i) for i, p in enumerate(ps)))
        return sum(counts), time.perf_counter() - t


def bench_vllm(model_dir: Path, ps: list[list[int]], tokens: int) -> float:
    from prime_rl.inference.testing import start_server

    with start_server(model_dir, max_num_seqs=max(64, len(ps))) as srv:
        asyncio.run(_vllm_round(srv.base_url, ps[:4], 8))  # warm-up
        n, dt = asyncio.run(_vllm_round(srv.base_url, ps, tokens))
    print(f"vllm:         {n} tokens in {dt:.2f} s = {n / dt:,.0f} tok/s")
    return n / dt


def bench_transformers(model_dir: Path, tok, ps: list[list[int]], tokens: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    width = max(map(len, ps))
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in ps])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps])
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad)
    with torch.no_grad():
        model.generate(input_ids=ids[:4], attention_mask=mask[:4], max_new_tokens=8, min_new_tokens=8, **kw)
        t = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
        dt = time.perf_counter() - t
    n = (out.shape[1] - width) * out.shape[0]
    print(f"transformers: {n} tokens in {dt:.2f} s = {n / dt:,.0f} tok/s")
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--model-dir", type=Path, default=None, help="serve this model instead of a tiny one")
    ap.add_argument("--smollm2", action="store_true", help="SmolLM2-135M-Instruct (prime-rl's cached conversion)")
    args = ap.parse_args()
    if args.smollm2:
        from prime_rl.models.smollm import cached_smollm

        args.model_dir = cached_smollm()

    from transformers import AutoTokenizer

    from prime_rl.models.tiny import build_tiny_model

    model_dir = args.model_dir or build_tiny_model(
        Path(tempfile.mkdtemp(prefix="bench-tiny-")), hidden=args.hidden, layers=args.layers
    )
    tok = AutoTokenizer.from_pretrained(model_dir)
    ps = prompts(tok, args.requests)
    print(f"model {model_dir}: {args.requests} requests x {args.tokens} sampled tokens, T=1, fp32")
    v = bench_vllm(model_dir, ps, args.tokens)
    t = bench_transformers(model_dir, tok, ps, args.tokens)
    print(f"ratio vllm / transformers = {v / t:.2f}x")


if __name__ == "__main__":
    main()
