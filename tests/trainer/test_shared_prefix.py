"""Shared-prefix micro-batches: the prefix runs once, yet logprobs, gradients and a whole SFT run equal those of
separate per-sample forwards (`logprobs.compute_logprobs` on one unpacked sample at a time)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from prime_rl.config.trainer import SFTConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import sft
from prime_rl.trainer.logprobs import compute_logprobs
from prime_rl.trainer.sft_data import SFTSample, shared_prefix_micro_batches
from prime_rl.trainer.shared_prefix import (
    SharedPrefixMicroBatch,
    common_prefix_len,
    make_shared_prefix_batch,
    shared_prefix_logprobs,
)


def test_common_prefix_len_hand_worked():
    a, b, c = np.array([5, 6, 7, 8, 9]), np.array([5, 6, 7, 1]), np.array([5, 6, 2, 2, 2, 2])
    no_loss = [np.zeros(len(x), bool) for x in (a, b, c)]
    assert common_prefix_len([a, b], no_loss[:2]) == 3  # 5 6 7
    assert common_prefix_len([a, b, c], no_loss) == 2  # 5 6
    assert common_prefix_len([a, a], no_loss[:1] * 2) == 4  # identical: one token left for the suffix
    loss = np.array([False, True, False, False, False])
    assert common_prefix_len([a, b], [loss, no_loss[1]]) == 1  # a loss token ends the prefix
    assert common_prefix_len([a, np.array([4, 6])], [no_loss[0], np.zeros(2, bool)]) == 0
    assert make_shared_prefix_batch([a, np.array([4, 6])], [no_loss[0], np.zeros(2, bool)]) is None


def _samples(rng, k: int, p: int) -> list[SFTSample]:
    head = rng.integers(0, 256, p)
    out = []
    for _ in range(k):
        n = int(rng.integers(3, 12))
        ids = np.concatenate([head, rng.integers(0, 256, n)])
        mask = np.zeros(len(ids), bool)
        mask[p + 1 :] = rng.random(n - 1) < 0.7
        out.append(SFTSample(ids, mask))
    return out


def test_logprobs_and_gradients_equal_separate_forwards(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    samples = _samples(np.random.default_rng(0), k=5, p=17)
    mb = make_shared_prefix_batch([s.input_ids for s in samples], [s.loss_mask for s in samples], pad_id=0)
    assert isinstance(mb, SharedPrefixMicroBatch) and len(mb.prefix_ids) >= 17
    p = len(mb.prefix_ids)
    lp, ent = shared_prefix_logprobs(model, mb)
    loss_mask = torch.from_numpy(mb.loss_mask)
    (-(lp * loss_mask).sum()).backward()
    shared_grads = {n: q.grad.clone() for n, q in model.named_parameters()}

    model.zero_grad()
    total = 0.0
    for k, s in enumerate(samples):
        ids = torch.from_numpy(s.input_ids).long()
        ref_lp, ref_ent = compute_logprobs(model, ids, torch.arange(len(ids)), torch.ones(len(ids)))
        n = len(ids) - p
        torch.testing.assert_close(lp[k, :n], ref_lp[p:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[k, :n], ref_ent[p:], atol=1e-5, rtol=1e-5)
        assert (lp[k, n:] == 0).all()  # padding
        m = torch.from_numpy(s.loss_mask)
        total = total - (ref_lp * m).sum()
    total.backward()
    for name, q in model.named_parameters():
        torch.testing.assert_close(shared_grads[name], q.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_sft_with_shared_prefix_equals_packed_sft(tiny_model_dir, tmp_path):
    """Same data, same seed: 3 SFT steps with shared_prefix and with packing give the same losses and weights."""
    from safetensors.torch import load_file

    rng = np.random.default_rng(1)
    system = "You are a careful assistant. Reverse the word the user gives, letter by letter. " * 2
    rows = []
    for _ in range(12):
        w = "".join(rng.choice(list("abcdefgh"), int(rng.integers(3, 8))))
        rows.append({"messages": [{"role": "system", "content": system}, {"role": "user", "content": w},
                                  {"role": "assistant", "content": w[::-1]}]})
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = {}
    for shared in (False, True):
        out = tmp_path / f"run_{shared}"
        cfg = SFTConfig(
            model={"name": str(tiny_model_dir)}, output_dir=str(out), optim={"lr": 3e-3}, max_steps=3,
            data={"path": str(data), "batch_size": 6, "shared_prefix": shared, "micro_batch_size": 4},
            seq_len=512, threads=1,
        )
        sft.run(cfg)
        runs[shared] = (
            [r["loss"] for r in read_metrics(out, "sft")],
            load_file(str(out / "weights" / "step_3" / "model.safetensors")),
        )
    (loss_a, w_a), (loss_b, w_b) = runs[False], runs[True]
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    for name in w_a:
        # AdamW moves each weight by up to lr = 3e-3 per step; float rounding of near-zero gradients stays far below
        torch.testing.assert_close(w_a[name], w_b[name], atol=1e-4, rtol=0, msg=name)


def test_grouping_falls_back_to_packing_without_common_prefix():
    a = SFTSample(np.array([1, 2, 3, 4]), np.array([False, False, True, True]))
    b = SFTSample(np.array([1, 2, 9]), np.array([False, False, True]))
    c = SFTSample(np.array([7, 8, 9]), np.array([False, True, True]))
    mbs = shared_prefix_micro_batches([a, b, c, c], micro_batch_size=2, seq_len=16)
    assert isinstance(mbs[0], SharedPrefixMicroBatch) and mbs[0].prefix_ids.tolist() == [1, 2]
    assert mbs[0].suffix_ids.tolist() == [[3, 4], [9, 0]] and mbs[0].valid.tolist() == [[True, True], [True, False]]
    assert len(mbs) == 2 and isinstance(mbs[1], SharedPrefixMicroBatch)  # c, c: prefix [7, 8]
    d = SFTSample(np.array([3, 8, 9]), np.array([False, True, True]))
    mixed = shared_prefix_micro_batches([c, d], micro_batch_size=2, seq_len=16)
    assert len(mixed) == 1 and not isinstance(mixed[0], SharedPrefixMicroBatch)  # no common first token: packed
    assert mixed[0].input_ids.tolist() == [7, 8, 9, 3, 8, 9]
