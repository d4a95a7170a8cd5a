"""Training throughput: prime-rl's engine (packed micro-batches, `prime_packed` attention, FSDP2 off for a lone fp32
process) versus a plain transformers loop (padded batches, `labels` with -100) on the same data, model and optimizer,
with the model FLOPs per token and this machine's fp32 matmul FLOP/s measured in the same run (an MFU figure).

    python benchmarks/trainer.py [--model tiny --hidden 128 --layers 2 | --model smollm2] [--samples 64 --batch 16
                                 --steps 4 --threads 2] [--fsdp]

Prints useful (non-pad) tokens/s of each variant, their ratio (measured in this one run), the padding fraction of the
plain loop, each variant's peak memory (peak RSS of its own child process on CPU; CUDA max allocated on GPU), the
model FLOPs per token, the measured fp32 matmul peak, and each variant's model FLOP/s as a fraction of that peak.
Each variant runs in a fresh child process; one warm-up step is not timed. `--fsdp` adds the engine with FSDP2
forced on (world size 1), to measure what the wrapper costs.

Model FLOPs per trained token (Kaplan et al. 2020, eq. 2.1; Chowdhery et al. 2022, appendix B): 6 x the weights
used in matmuls (every linear layer and the output head; not the embedding lookup) plus the attention scores and
weighted sums, 6 x layers x heads x head_dim x (mean causal context), where the mean causal context of a sample of
L tokens is (L + 1) / 2, averaged over the trained tokens. Padding and the masked half of attention are not model
FLOPs. The peak is the best of a few 2048 x 2048 fp32 `torch.mm` at the same thread count.
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


def matmul_flops(threads: int, n: int = 2048, repeats: int = 5) -> float:
    """Best fp32 FLOP/s of `repeats` n x n x n `torch.mm` (2 n^3 FLOPs each) with `threads` intra-op threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def flops_per_token(config, lengths: list[int]) -> float:
    """Training model FLOPs per token (module docstring) for samples of `lengths` tokens."""
    h, layers = config.hidden_size, config.num_hidden_layers
    heads, kv = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    hd = getattr(config, "head_dim", None) or h // heads
    inter, vocab = config.intermediate_size, config.vocab_size
    per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter  # q, k, v, o; gate, up, down
    matmul_weights = layers * per_layer + h * vocab  # + the output head
    ctx = sum(L * (L + 1) / 2 for L in lengths) / sum(lengths)  # mean causal context per token
    return 6 * matmul_weights + 6 * layers * heads * hd * ctx


def run_prime(args, model_dir: str, q, fsdp: bool | str) -> None:
    import torch

    from prime_rl.config.trainer import SFTConfig
    from prime_rl.trainer.engine import Engine, EngineConfig
    from prime_rl.trainer.loss import sft_loss
    from prime_rl.trainer.sft_data import SFTSample, pack_samples

    torch.set_num_threads(args.threads)
    cfg = SFTConfig(model={"name": model_dir, "fsdp": fsdp, "dtype": "float32"}, output_dir=tempfile.mkdtemp(),
                    optim={"lr": 1e-4}, seq_len=args.seq_len, max_steps=args.steps + 1, threads=args.threads)  # fmt: skip
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
    p.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    p.add_argument("--hidden", type=int, default=128, help="tiny model width")
    p.add_argument("--layers", type=int, default=2, help="tiny model depth")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--batch", type=int, default=16, help="samples per optimizer step")
    p.add_argument("--plain-micro", type=int, default=4, help="samples per padded micro-batch in the plain loop")
    p.add_argument("--seq-len", type=int, default=1024, help="packed micro-batch length for prime-rl")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fsdp", action="store_true", help="also run the engine with FSDP2 forced on (world size 1)")
    args = p.parse_args()

    from transformers import AutoConfig

    if args.model == "smollm2":
        from prime_rl.models.smollm import cached_smollm

        model_dir, label = str(cached_smollm()), "SmolLM2-135M"
    else:
        from prime_rl.models.tiny import cached_tiny_model

        model_dir = str(cached_tiny_model(hidden=args.hidden, layers=args.layers))
        label = f"tiny Qwen3 hidden {args.hidden} x {args.layers} layers"
    peak = matmul_flops(args.threads)
    data = make_data(args.samples, args.seed)
    lengths = [len(data[(s * args.batch + j) % len(data)][0]) for s in range(1, args.steps + 1) for j in range(args.batch)]
    fpt = flops_per_token(AutoConfig.from_pretrained(model_dir), lengths)
    ctx = mp.get_context("spawn")
    variants = [("plain transformers (padded)", run_plain, ()), ("prime-rl engine (packed)", run_prime, ("auto",))]
    if args.fsdp:
        variants.append(("prime-rl engine, FSDP2 forced", run_prime, (True,)))
    res = {}
    for name, fn, extra in variants:
        q = ctx.Queue()
        proc = ctx.Process(target=fn, args=(args, model_dir, q, *extra))
        proc.start()
        res[name] = q.get(timeout=3600)
        proc.join(timeout=60)
        # each variant as it finishes, so a run stopped at a time limit still shows what it measured
        print(f"done: {name}: {res[name]['tokens_per_s']:.0f} useful tokens/s", flush=True)
    print(f"model: {label}; {args.batch} samples/step (16-384 tokens), {args.steps} timed steps, {args.threads} threads")
    print(f"model FLOPs per trained token: {fpt / 1e6:.2f} MFLOP; fp32 matmul peak measured now: {peak / 1e9:.1f} GFLOP/s")
    print(f"{'variant':32s} {'tokens/s':>10s} {'peak GiB':>9s} {'pad frac':>9s} {'GFLOP/s':>8s} {'MFU':>6s}")
    for name, r in res.items():
        achieved = r["tokens_per_s"] * fpt
        print(f"{name:32s} {r['tokens_per_s']:10.0f} {r['peak_gib']:9.2f} {r['pad_frac']:9.2f} {achieved / 1e9:8.1f} "
              f"{achieved / peak:6.1%}")
    a, b = res["prime-rl engine (packed)"], res["plain transformers (padded)"]
    print(f"ratio packed / padded tokens/s: {a['tokens_per_s'] / b['tokens_per_s']:.2f}x")
    if args.fsdp:
        f = res["prime-rl engine, FSDP2 forced"]
        print(f"ratio engine without / with FSDP2 at world size 1: {a['tokens_per_s'] / f['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
