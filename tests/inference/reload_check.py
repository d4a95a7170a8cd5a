"""Reload equality: what a vLLM server gives after `/update_weights` must equal what a fresh server on the same
folder gives. One server does both: it is started on folder A (fresh), then reloads another folder B, then A again.
Shared by the tiny-model and SmolLM2 tests."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from prime_rl.config.orchestrator import SamplingConfig


@dataclass
class Outputs:
    """Greedy completion ids and a seeded T=1 sample (ids + logprobs) per prompt."""

    greedy: list[list[int]]
    sampled: list[list[int]]
    logprobs: list[list[float]]


async def outputs(client, prompts: list[list[int]], n_tokens: int, seed: int = 3) -> Outputs:
    """Greedy (top_k = 1) and seeded temperature-1 completions of each prompt, `n_tokens` at most."""
    greedy = SamplingConfig(temperature=1.0, top_k=1, max_completion_tokens=n_tokens)
    out = Outputs([], [], [])
    for i, p in enumerate(prompts):
        g = await client.generate(p, greedy)
        s = await client.generate(p, SamplingConfig(temperature=1.0, max_completion_tokens=n_tokens, seed=seed + i))
        out.greedy.append(list(g.completion_ids))
        out.sampled.append(list(s.completion_ids))
        out.logprobs.append([float(x) for x in s.logprobs])
    return out


def max_logprob_gap(a: Outputs, b: Outputs) -> float:
    """max |logprob a - logprob b| over the sampled tokens (the samples must be the same ids)."""
    gap = 0.0
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        gap = max(gap, max((abs(u - v) for u, v in zip(x, y, strict=True)), default=0.0))
    return gap


@functools.lru_cache(maxsize=2)
def hf_model(model_dir: Path):
    """transformers model of a folder (fp32, eval mode); the last two are kept loaded."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def hf_greedy(model_dir: Path, prompt: list[int], n: int, stop: set[int]) -> list[int]:
    """Greedy continuation under transformers (fp32), stopping after a token in `stop` (included)."""
    model = hf_model(Path(model_dir))
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            if ids[-1] in stop:
                break
    return ids[len(prompt) :]


async def check_reload_equals_fresh(client, fresh_dir: Path, other_dir: Path, prompts, n_tokens: int, tol: float,
                                    stop: set[int]) -> dict:  # fmt: skip
    """The server at `client` was started on `fresh_dir`. Record its outputs, reload `other_dir` (outputs must
    differ and match transformers' greedy on it), reload `fresh_dir`: greedy ids and sampled ids must equal the
    fresh server's, sampled logprobs within `tol`. Returns the measured gaps."""
    fresh = await outputs(client, prompts, n_tokens)
    await client.update_weights(str(other_dir), 1)
    other = await outputs(client, prompts, n_tokens)
    assert other.greedy != fresh.greedy, "the two folders give the same greedy output: the check proves nothing"
    want = hf_greedy(other_dir, prompts[0], n_tokens, stop)
    assert other.greedy[0] == want, f"after reloading {other_dir}: vLLM greedy {other.greedy[0]} != transformers {want}"
    await client.update_weights(str(fresh_dir), 2)
    again = await outputs(client, prompts, n_tokens)
    assert again.greedy == fresh.greedy, "greedy output after reload differs from the fresh server's"
    assert again.sampled == fresh.sampled, "seeded sample after reload differs from the fresh server's"
    gap = max_logprob_gap(again, fresh)
    assert gap <= tol, f"logprobs after reload differ from the fresh server's by {gap}"
    return {"logprob_gap": gap, "tokens": sum(map(len, fresh.sampled))}
