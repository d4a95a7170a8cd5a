"""The inference inputs of `prime-rl plan` (`[inference]`) measured on one vLLM server, for a model and concurrency.

    python benchmarks/plan_inputs.py [--hidden 64 --layers 2 | --model-dir DIR] [--batch 64] [--rounds 3]

Starts prime-rl's vLLM server (alone: nothing else should run) and times, each round, requests sent at once:
1 request of 2 and of `--long` sampled tokens, `--batch` requests of 2 and of `--long` tokens (short chat prompts,
eos ignored), and `--batch` requests with `--prompt` prompt tokens and 2 sampled tokens, over one keep-alive HTTP
session (as the orchestrator's client sends them). Medians over the rounds give, with the simulator's replica
model (prime_rl.simulate.replica):

- t(1) = (T1(long) - T1(2)) / (long - 2), the decode iteration of one sequence: `single_seq_tokens_per_s` = 1 / t(1)
- t(B) = (TB(long) - TB(2)) / (long - 2): `peak_tokens_per_s` = B / t(B), `peak_batch` = B
- `request_overhead_s` = (TB(2) - 2 t(B)) / B: the serial cost of a request (HTTP, scheduling), what makes B short
  requests take longer than two iterations
- `prefill_tokens_per_s` = B * (prompt - short prompt) / (TB(prompt) - TB(2))

and prints them as the `[inference]` table of a plan config.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path


async def _round(s, base_url: str, ps: list[list[int]], tokens: int) -> float:
    """Seconds until every request of `ps` (sent at once, `tokens` sampled tokens each) is answered, on the
    keep-alive session `s` (as the orchestrator's client sends them)."""

    async def one(p: list[int], i: int) -> None:
        body = {"token_ids": p, "sampling_params": {"temperature": 1.0, "max_tokens": tokens, "ignore_eos": True,
                                                   "logprobs": 0, "detokenize": False, "seed": i}}  # fmt: skip
        async with s.post(base_url + "/inference/v1/generate", json=body) as r:
            if r.status != 200:
                raise RuntimeError(f"vLLM answered {r.status}: {(await r.text())[:2000]}")
            await r.read()

    t = time.perf_counter()
    await asyncio.gather(*(one(p, i) for i, p in enumerate(ps)))
    return time.perf_counter() - t


async def _rounds(base_url: str, short: list[list[int]], longp: list[list[int]], long: int,
                  rounds: int) -> dict[str, list[float]]:  # fmt: skip
    import aiohttp

    t: dict[str, list[float]] = {k: [] for k in ("1x2", "1xL", "Bx2", "BxL", "BxP")}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        await _round(s, base_url, short, 4)  # warm-up: opens one connection per concurrent request
        for _ in range(rounds):
            t["1x2"].append(await _round(s, base_url, short[:1], 2))
            t["1xL"].append(await _round(s, base_url, short[:1], long))
            t["Bx2"].append(await _round(s, base_url, short, 2))
            t["BxL"].append(await _round(s, base_url, short, long))
            t["BxP"].append(await _round(s, base_url, longp, 2))
    return t


def measure(model_dir: Path, batch: int, long: int, prompt: int, rounds: int, dtype: str = "float32") -> dict[str, float]:
    """The `[inference]` fields for `model_dir` at `batch` concurrent requests (see the module docstring)."""
    from transformers import AutoTokenizer

    from prime_rl.inference.testing import start_server

    tok = AutoTokenizer.from_pretrained(model_dir)
    short = [tok.apply_chat_template([{"role": "user", "content": f"Answer with one digit ({i})."}], tokenize=True,
                                     add_generation_prompt=True) for i in range(batch)]  # fmt: skip
    short = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in short]
    base = sum(map(len, short)) / len(short)
    filler = tok.encode("the grid operator buys power at the hub every hour of the day. " * (prompt // 16 + 1))
    longp = [filler[i : i + prompt - len(p)] + p for i, p in enumerate(short)]
    with start_server(model_dir, max_num_seqs=max(64, batch), dtype=dtype) as srv:
        t = asyncio.run(_rounds(srv.base_url, short, longp, long, rounds))
    m = {k: statistics.median(v) for k, v in t.items()}
    t1 = (m["1xL"] - m["1x2"]) / (long - 2)
    tb = (m["BxL"] - m["Bx2"]) / (long - 2)
    overhead = max(0.0, (m["Bx2"] - 2 * tb) / batch)
    prefill = batch * (prompt - base) / max(1e-9, m["BxP"] - m["Bx2"])
    print("medians (s): " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()))
    return {"single_seq_tokens_per_s": 1 / t1, "peak_tokens_per_s": batch / tb, "peak_batch": batch,
            "request_overhead_s": overhead, "prefill_tokens_per_s": prefill}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--model-dir", type=Path, default=None, help="measure this model instead of a random tiny one")
    ap.add_argument("--batch", type=int, default=64, help="concurrent requests (the run's max_inflight)")
    ap.add_argument("--long", type=int, default=130, help="sampled tokens of the long requests")
    ap.add_argument("--prompt", type=int, default=1024, help="prompt tokens of the prefill requests")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="float32", help="vLLM dtype (the example configs pin float32)")
    args = ap.parse_args()
    from prime_rl.models.tiny import build_tiny_model

    model_dir = args.model_dir or build_tiny_model(
        Path(tempfile.mkdtemp(prefix="plan-tiny-")), hidden=args.hidden, layers=args.layers
    )
    print(f"model {model_dir}, {args.dtype}, {args.batch} concurrent requests, {args.rounds} rounds")
    fields = measure(model_dir, args.batch, args.long, args.prompt, args.rounds, args.dtype)
    print("[inference]")
    for k, v in fields.items():
        print(f"{k} = {v:.6g}")


if __name__ == "__main__":
    main()
