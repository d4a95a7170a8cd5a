"""Training throughput: prime-rl's engine (packed micro-batches, FSDP2, world size 1) versus a plain transformers
loop (padded batches, `labels` with -100) on the same conversations-like data, same model, same optimizer.

    .venv/bin/python benchmarks/trainer.py [--hidden 128 --layers 2 --samples 64 --batch 16 --steps 4 --threads 2]

Prints tokens/s (real, non-pad tokens) of each, their ratio (measured in this one run), the padding fraction of
the plain loop, and each variant's peak memory (peak RSS of its own child process on CPU; CUDA max allocated on
GPU). Each variant runs in a fresh child process so peak memory is its own; one warm-up step is not timed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time

import numpy as np


def make_data(n: int, seed: int, min_len: int = 16, max_len: int = 384) -> list[tuple[np.ndarray, np.ndarray]]:
    """`n` samples of random byte tokens with lengths uniform in [min_len, max_len]; loss on the second half."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        L = int(rng.integers(min_len, max_len + 1))
        ids = rng.integers(0, 256, L)
        mask = np.zeros(L, bool)
        mask[L // 2 :] = True
        out.append((ids, mask))
    return out


def _peak(device) -> float:
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_prime(args, model_dir: str, q) -> None:
    import torch

    from prime_rl.config.trainer import SFTConfig
    from prime_rl.trainer.engine import Engine, EngineConfig
    from prime_rl.trainer.loss import sft_loss
    from prime_rl.trainer.sft_data import SFTSample, pack_samples

    torch.set_num_threads(args.threads)
    cfg = SFTConfig(model={"name": model_dir}, output_dir=tempfile.mkdtemp(), optim={"lr": 1e-4}, seq_len=args.seq_len,
                    max_steps=args.steps + 1, threads=args.threads)
    eng = Engine(EngineConfig.from_config(cfg), process="bench")
    data = [SFTSample(ids, m) for ids, m in make_data(args.samples, args.seed)]
    tokens, t = 0, 0.0
    try:
        for s in range(args.steps + 1):
            batch = [data[(s * args.batch + j) % len(data)] for j in range(args.batch)]
            total = sum(int(b.loss_mask.sum()) for b in batch)
            t0 = time.perf_counter()
            eng.train_step(pack_samples(batch, args.seq_len), total, sft_loss, None)
            if s:
                t += time.perf_counter() - t0
                tokens += sum(len(b) for b in batch)
        q.put({"tokens_per_s": tokens / t, "peak_gib": _peak(eng.dist.device), "pad_frac": 0.0})
    finally:
        eng.close()


def run_plain(args, model_dir: str, q) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = make_data(args.samples, args.seed)
    tokens, padded, t = 0, 0, 0.0
    for s in range(args.steps + 1):
        batch = [data[(s * args.batch + j) % len(data)] for j in range(args.batch)]
        t0 = time.perf_counter()
        opt.zero_grad()
        for i in range(0, len(batch), args.plain_micro):
            mb = batch[i : i + args.plain_micro]
            L = max(len(ids) for ids, _ in mb)
            ids = torch.zeros(len(mb), L, dtype=torch.long)
            att = torch.zeros(len(mb), L, dtype=torch.long)
            labels = torch.full((len(mb), L), -100, dtype=torch.long)
            for r, (x, m) in enumerate(mb):
                ids[r, : len(x)] = torch.from_numpy(x)
                att[r, : len(x)] = 1
                labels[r, : len(x)] = torch.where(torch.from_numpy(m), torch.from_numpy(x), -100)
            out = model(input_ids=ids.to(dev), attention_mask=att.to(dev), labels=labels.to(dev), use_cache=False)
            (out.loss * len(mb) / len(batch)).backward()
            if s:
                padded += ids.numel()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s:
            t += time.perf_counter() - t0
            tokens += sum(len(x) for x, _ in batch)
    q.put({"tokens_per_s": tokens / t, "peak_gib": _peak(dev), "pad_frac": 1 - tokens / padded})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--batch", type=int, default=16, help="samples per optimizer step")
    p.add_argument("--plain-micro", type=int, default=4, help="samples per padded micro-batch in the plain loop")
    p.add_argument("--seq-len", type=int, default=1024, help="packed micro-batch length for prime-rl")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    from prime_rl.models.tiny import cached_tiny_model

    model_dir = str(cached_tiny_model(hidden=args.hidden, layers=args.layers))
    ctx = mp.get_context("spawn")
    res = {}
    for name, fn in (("plain transformers (padded)", run_plain), ("prime-rl engine (packed)", run_prime)):
        q = ctx.Queue()
        proc = ctx.Process(target=fn, args=(args, model_dir, q))
        proc.start()
        res[name] = q.get(timeout=1800)
        proc.join(timeout=60)
    print(f"model: tiny Qwen3 hidden {args.hidden} x {args.layers} layers; {args.batch} samples/step, {args.steps} timed steps")
    print(f"{'variant':32s} {'tokens/s':>10s} {'peak GiB':>9s} {'pad frac':>9s}")
    for name, r in res.items():
        print(f"{name:32s} {r['tokens_per_s']:10.0f} {r['peak_gib']:9.2f} {r['pad_frac']:9.2f}")
    a, b = res["prime-rl engine (packed)"], res["plain transformers (padded)"]
    print(f"ratio packed / padded tokens/s: {a['tokens_per_s'] / b['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
