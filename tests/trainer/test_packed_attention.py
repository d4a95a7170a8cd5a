"""The trainer's fast paths give the same numbers as the slow ones they replace (issue 17):

- `prime_packed` attention (each packed sample attended to separately, grouped by length; no T x T mask) equals a
  separate forward of each sample and the explicit block-diagonal mask, in logits and in gradients;
- concatenating micro-batches (`micro_batch_tokens`) changes neither the loss nor the gradients of a step;
- `model.fsdp = auto` trains a lone fp32 process without FSDP2, with the gradients of the FSDP2-wrapped model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.trainer.helpers import full, make_samples, pack, trainer_config

from prime_rl.trainer.engine import Engine, EngineConfig
from prime_rl.trainer.logprobs import packed_causal_mask
from prime_rl.trainer.loss import dppo_kl_loss
from prime_rl.trainer.packed_attention import PackPlan, register, sample_spans
from prime_rl.transport.batch import MicroBatch, concat_micro_batches


@pytest.fixture(scope="module")
def models(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    register()
    torch.manual_seed(0)
    sdpa = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), attn_implementation="sdpa", dtype=torch.float32)
    packed = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), attn_implementation="prime_packed",
                                                  dtype=torch.float32)  # fmt: skip
    return sdpa, packed


def test_spans_and_plan_by_hand():
    pos = torch.tensor([0, 1, 2, 0, 1, 0, 1, 2, 0])  # samples of 3, 2, 3, 1 tokens
    assert sample_spans(pos) == [(0, 3), (3, 5), (5, 8), (8, 9)]
    plan = PackPlan(pos)
    assert [(L, n, idx.tolist()) for L, n, idx in plan.groups] == [(1, 1, [8]), (2, 1, [3, 4]),
                                                                  (3, 2, [0, 1, 2, 5, 6, 7])]  # fmt: skip
    laid = torch.cat([idx for _, _, idx in plan.groups])
    assert torch.equal(laid[plan.inverse], torch.arange(9))


def test_packed_attention_equals_separate_forwards_and_the_dense_mask(models):
    sdpa, packed = models
    lens = [5, 17, 5, 30, 1, 17, 9]  # repeated lengths (one sdpa call for both) and a one-token sample
    pos = torch.cat([torch.arange(L) for L in lens])
    ids = torch.randint(0, 256, (int(pos.shape[0]),), generator=torch.Generator().manual_seed(0))
    got = packed(input_ids=ids[None], position_ids=pos[None], use_cache=False).logits[0]
    starts = np.cumsum([0, *lens[:-1]])
    alone = torch.cat([sdpa(input_ids=ids[None, s : s + L], use_cache=False).logits[0] for s, L in zip(starts, lens, strict=True)])
    dense = sdpa(input_ids=ids[None], position_ids=pos[None], attention_mask=packed_causal_mask(pos), use_cache=False).logits[0]
    torch.testing.assert_close(got, alone, atol=2e-6, rtol=0)
    torch.testing.assert_close(got, dense, atol=2e-6, rtol=0)
    w = torch.randn(got.shape, generator=torch.Generator().manual_seed(1))
    sdpa.zero_grad()
    packed.zero_grad()
    (dense * w).sum().backward()
    (got * w).sum().backward()
    for (name, a), (_, b) in zip(sdpa.named_parameters(), packed.named_parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_packed_attention_keeps_explicit_masks_and_caches(models):
    """Several rows and a KV cache (shared_prefix's suffix pass) take sdpa's own masks: same as `sdpa`."""
    sdpa, packed = models
    prefix = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(2))
    suffix = torch.randint(0, 256, (3, 4), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(7, 11).repeat(3, 1)
    outs = []
    for m in (sdpa, packed):
        with torch.no_grad():
            cache = m(input_ids=prefix, use_cache=True).past_key_values
            cache.batch_repeat_interleave(3)
            outs.append(m(input_ids=suffix, position_ids=pos, past_key_values=cache, use_cache=False).logits)
    torch.testing.assert_close(outs[1], outs[0], atol=2e-6, rtol=0)


def test_concat_micro_batches_by_hand():
    mbs = [MicroBatch.empty_like(n) for n in (6, 3, 2, 5, 9, 1)]
    for i, mb in enumerate(mbs):
        mb.input_ids[:] = i
    out = concat_micro_batches(mbs, 9)
    assert [len(m) for m in out] == [9, 7, 9, 1]  # 6+3 | 2+5 | 9 | 1 (in order, never past 9)
    assert [len(m) for m in concat_micro_batches(mbs, 10)] == [9, 7, 10]
    assert out[0].input_ids.tolist() == [0] * 6 + [1] * 3
    assert out[0].position_ids.tolist() == [*range(6), *range(3)]  # samples stay separate
    assert out[2] is mbs[4]


def _step(model_dir, run, samples, n_micro, **over):
    cfg = trainer_config(model_dir, run, **over)
    eng = Engine(EngineConfig.from_config(cfg))
    total = int(sum(s["loss_mask"].sum() for s in samples))
    try:
        mbs = pack(samples, n_micro)
        if cfg.micro_batch_tokens:
            mbs = concat_micro_batches(mbs, cfg.micro_batch_tokens)
        m = eng.train_step(mbs, total, dppo_kl_loss, cfg.loss)
        return m, {n: full(p.grad).clone() for n, p in eng.model.named_parameters()}, eng.model, len(mbs)
    finally:
        eng.close()


def test_concatenated_micro_batches_give_the_same_step(tiny_model_dir, tmp_path):
    samples = make_samples(tiny_model_dir, n=8, seed=1, temperature=0.9, prompt_len=3, comp_len=5)
    m4, g4, _, n4 = _step(tiny_model_dir, tmp_path / "a", samples, 4, seq_len=32)
    m1, g1, _, n1 = _step(tiny_model_dir, tmp_path / "b", samples, 4, seq_len=32, micro_batch_tokens=64)
    assert (n4, n1) == (4, 1)
    assert m1["loss"] == pytest.approx(m4["loss"], abs=1e-6)
    for k in g4:
        torch.testing.assert_close(g1[k], g4[k], atol=1e-7, rtol=1e-4)


def test_fsdp_auto_is_plain_at_world_size_1_with_fsdp_gradients(tiny_model_dir, tmp_path):
    from torch.distributed.fsdp import FSDPModule

    samples = make_samples(tiny_model_dir, n=6, seed=2, temperature=1.0)
    m_plain, g_plain, model_plain, _ = _step(tiny_model_dir, tmp_path / "a", samples, 2)
    m_fsdp, g_fsdp, model_fsdp, _ = _step(tiny_model_dir, tmp_path / "b", samples, 2, model={"fsdp": True})
    assert not isinstance(model_plain, FSDPModule) and isinstance(model_fsdp, FSDPModule)
    assert m_plain["loss"] == pytest.approx(m_fsdp["loss"], abs=1e-7)
    assert m_plain["grad_norm"] == pytest.approx(m_fsdp["grad_norm"], rel=1e-6)
    for k in g_plain:
        torch.testing.assert_close(g_plain[k], g_fsdp[k], atol=1e-8, rtol=1e-6)


def test_micro_batch_tokens_below_seq_len_or_with_shared_prefix_is_refused(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="below seq_len"):
        trainer_config(tiny_model_dir, tmp_path, seq_len=64, micro_batch_tokens=32)
    with pytest.raises(ValueError, match="shared_prefix"):
        trainer_config(tiny_model_dir, tmp_path, micro_batch_tokens=4096, shared_prefix=True)
