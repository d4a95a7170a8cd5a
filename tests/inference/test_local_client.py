"""`TransformersClient` (eval without a server): batched sampling whose tokens and logprobs match an unbatched
transformers forward, greedy decoding equal to a hand-written argmax loop, stop ids and max_tokens."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import torch
from tests.trainer.helpers import reference_logprobs

from prime_rl.config.orchestrator import EvalCommandConfig, EvalSamplingConfig, SamplingConfig
from prime_rl.inference.local_client import TransformersClient
from prime_rl.models.tiny import cached_tiny_model


@pytest.fixture(scope="module")
def model_dir():
    return cached_tiny_model()


@pytest.fixture(scope="module")
def ref(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def argmax_completion(ref, prompt: list[int], n: int, stops: set[int]) -> list[int]:
    """Greedy decoding one token at a time on the unpadded prompt (no generate, no batch)."""
    ids = list(prompt)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            t = int(ref(torch.tensor([ids])).logits[0, -1].argmax())
            out.append(t)
            ids.append(t)
            if t in stops:
                break
    return out


PROMPTS = [list(range(40, 43)), list(range(60, 69)), list(range(80, 97))]  # 3, 9, 17 tokens: left padding matters


async def test_batched_sampling_logprobs_match_unbatched_forward(model_dir, ref):
    client = TransformersClient(model_dir, seed=0)
    s = SamplingConfig(temperature=0.7, max_completion_tokens=12)
    res = await asyncio.gather(*(client.generate(p, s) for p in PROMPTS))
    assert client.batches == 1  # the three concurrent requests were sampled together
    for p, r in zip(PROMPTS, res, strict=True):
        assert r.prompt_ids == p and 1 <= len(r.completion_ids) <= 12 and len(r.logprobs) == len(r.completion_ids)
        want = reference_logprobs(ref, p + r.completion_ids, 0.7)[len(p):]
        np.testing.assert_allclose(r.logprobs, want, atol=1e-4)
        assert r.finish_reason == ("stop" if r.completion_ids[-1] in client.eos_ids else "length")
    await client.aclose()


async def test_greedy_equals_argmax_loop_and_stops(model_dir, ref):
    client = TransformersClient(model_dir)
    eos = set(client.eos_ids)
    greedy = EvalSamplingConfig(temperature=0.0, max_completion_tokens=10)
    res = await asyncio.gather(*(client.generate(p, greedy) for p in PROMPTS))
    wants = [argmax_completion(ref, p, 10, eos) for p in PROMPTS]
    assert [r.completion_ids for r in res] == wants
    for p, r in zip(PROMPTS, res, strict=True):  # T = 0: logprobs at T = 1
        np.testing.assert_allclose(r.logprobs, reference_logprobs(ref, p + r.completion_ids, 1.0)[len(p):], atol=1e-4)
    c = wants[1]
    j = next(j for j in range(1, len(c)) if c[j] not in c[:j])  # first token not seen before in the completion
    cut = await client.generate(PROMPTS[1], greedy, stop_token_ids=[c[j]])
    assert cut.completion_ids == c[: j + 1] and cut.finish_reason == "stop"
    short = await client.generate(PROMPTS[1], greedy, max_tokens=2)
    assert short.completion_ids == c[:2] and short.finish_reason == "length"
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        await client.generate(PROMPTS[1], greedy, max_tokens=0)
    await client.aclose()


async def test_eval_command_with_transformers_backend(model_dir, tmp_path):
    from prime_rl.orchestrator.eval_cmd import evaluate

    cfg = EvalCommandConfig(
        model={"name": str(model_dir)}, backend="transformers", output_dir=tmp_path,
        eval={"num_examples": 3, "rollouts_per_example": 2, "sampling": {"max_completion_tokens": 16},
              "source": [{"name": "rev", "env": {"id": "reverse-text", "agent": {"max_turns": 1}}}]},
    )
    res = await evaluate(cfg)
    rows = [json.loads(x) for x in (tmp_path / model_dir.name / "step_0.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["rewards"]) == 2 for r in rows)
    assert res.by_source["rev"]["error_pct"] == 0.0  # every rollout was sampled and scored, none masked
