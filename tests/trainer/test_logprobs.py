"""Trainer logprobs: temperature, alignment with the batch format, and packing without cross-sample attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.trainer.helpers import reference_logprobs

from prime_rl.trainer.logprobs import compute_logprobs, forward_logits, packed_causal_mask, token_logprobs


def test_logprobs_at_temperature_equal_log_softmax_of_logits_over_T():
    g = torch.Generator().manual_seed(0)
    T, V = 7, 11
    logits = torch.randn(T, V, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (T,), generator=g)
    temps = torch.tensor([1.0, 0.7, 1.3, 1.0, 0.5, 2.0, 0.9], dtype=torch.float64)
    pos = torch.arange(T)
    lp, ent = token_logprobs(logits, ids, pos, temps)
    assert lp[0].item() == 0.0 and ent[0].item() == 0.0
    for t in range(1, T):
        z = logits[t - 1] / temps[t]  # the logits at t-1 predict token t, at token t's temperature
        ref = z[ids[t]] - torch.logsumexp(z, 0)
        assert lp[t].item() == pytest.approx(ref.item(), abs=1e-12)
        p = torch.softmax(z, 0)
        assert ent[t].item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-12)


def test_sample_starts_get_zero_logprob():
    logits = torch.randn(6, 5, dtype=torch.float64)
    lp, _ = token_logprobs(logits, torch.tensor([1, 2, 3, 4, 0, 1]), torch.tensor([0, 1, 2, 0, 1, 2]), torch.ones(6))
    assert lp[3].item() == 0.0 and lp[4].item() != 0.0


def test_packed_mask_is_block_diagonal_causal():
    m = packed_causal_mask(torch.tensor([0, 1, 2, 0, 1]))[0, 0].int().tolist()
    assert m == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]]


def test_packed_logprobs_equal_per_sample_logprobs(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, 256, n).tolist() for n in (5, 9, 1, 7)]
    temp = 0.8
    ids = torch.tensor(sum(samples, []))
    pos = torch.tensor(sum([list(range(len(s))) for s in samples], []))
    with torch.no_grad():
        lp, _ = compute_logprobs(model, ids, pos, torch.full((len(ids),), temp))
    ref = np.concatenate([reference_logprobs(model, s, temp) for s in samples])  # unpacked, one sample at a time
    np.testing.assert_allclose(lp.numpy(), ref, atol=2e-5)
    # the test can fail: a plain causal mask over the packed sequence lets samples see each other
    with torch.no_grad():
        leaky = model(input_ids=ids[None], position_ids=pos[None], use_cache=False,
                      attention_mask=torch.ones(1, 1, len(ids), len(ids), dtype=torch.bool).tril()).logits[0]
    leaky_lp, _ = token_logprobs(leaky.float(), ids, pos, torch.full((len(ids),), temp))
    assert np.abs(leaky_lp.numpy() - ref).max() > 1e-3
    # and forward_logits itself returns [T, V]
    assert forward_logits(model, ids, pos).shape == (len(ids), model.config.vocab_size)
