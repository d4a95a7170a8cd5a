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


def _group_samples(model_dir, seed: int = 0, temperature: float = 0.8) -> list[dict]:
    """2 prompts x 4 members (a GRPO group each): one shared 6-token head, per-prompt 5 tokens, 3-7 completion
    tokens; inference logprobs from an independent unpacked forward at `temperature`, perturbed so ratios != 1."""
    from tests.trainer.helpers import reference_logprobs
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    rng = np.random.default_rng(seed)
    head = rng.integers(0, 256, 6).tolist()
    out = []
    for _ in range(2):
        prompt = head + rng.integers(0, 256, 5).tolist()
        for _ in range(4):
            ids = prompt + rng.integers(0, 256, int(rng.integers(3, 8))).tolist()
            n = len(ids)
            mask = np.zeros(n, bool)
            mask[len(prompt):] = True
            lp = reference_logprobs(model, ids, temperature) + rng.normal(0, 0.05, n).astype(np.float32)
            out.append(dict(
                input_ids=np.array(ids), position_ids=np.arange(n), loss_mask=mask,
                advantages=np.where(mask, rng.normal(), 0.0).astype(np.float32),
                inference_logprobs=np.where(mask, lp, 0.0).astype(np.float32),
                temperature=np.full(n, temperature, np.float32),
            ))
    rng.shuffle(out)  # the orchestrator's packing order need not keep a group together
    return out


def test_rl_step_on_regrouped_micro_batches_equals_packed(tiny_model_dir, tmp_path):
    from tests.trainer.helpers import full, pack, trainer_config

    from prime_rl.trainer.engine import Engine, EngineConfig
    from prime_rl.trainer.loss import dppo_kl_loss
    from prime_rl.trainer.shared_prefix import regroup

    samples = _group_samples(tiny_model_dir)
    packed = pack(samples, 3)
    groups = regroup(packed, micro_batch_size=4)
    assert len(groups) == 2 and all(isinstance(g, SharedPrefixMicroBatch) for g in groups)
    assert [len(g.prefix_ids) for g in groups] == [11, 11]  # each group's whole prompt runs once
    total = int(sum(s["loss_mask"].sum() for s in samples))
    results = []
    for name, mbs in (("packed", packed), ("regrouped", groups)):
        cfg = trainer_config(tiny_model_dir, tmp_path / name)
        eng = Engine(EngineConfig.from_config(cfg))
        try:
            m = eng.train_step(mbs, total, dppo_kl_loss, cfg.loss)
            grads = {n: full(p.grad).clone() for n, p in eng.model.named_parameters()}
        finally:
            eng.close()
        results.append((m, grads))
    (ma, ga), (mb, gb) = results
    for key in ("loss", "mismatch_kl", "entropy", "ratio", "loss_tokens", "tokens"):
        assert ma[key] == pytest.approx(mb[key], rel=1e-5, abs=1e-7), key
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], atol=1e-7, rtol=1e-4, msg=name)
    # rank padding (no loss tokens) is dropped by regroup; the trainer pads the count back
    from prime_rl.transport.batch import MicroBatch

    assert len(regroup([*packed, MicroBatch.empty_like(3)], micro_batch_size=8)) == 1


def test_rl_trainer_with_shared_prefix_matches_packed_run(tiny_model_dir, tmp_path):
    """`trainer` with shared_prefix = true over 3 steps: the same per-step losses as the packed run."""
    from tests.trainer.helpers import trainer_config, write_stream

    from prime_rl.trainer import rl

    samples = _group_samples(tiny_model_dir, seed=1)
    losses = {}
    for shared in (False, True):
        run = tmp_path / f"run_{shared}"
        write_stream(run, {s: samples for s in (1, 2, 3)})
        rl.run(trainer_config(tiny_model_dir, run, optim={"lr": 1e-3}, shared_prefix=shared, micro_batch_size=4))
        losses[shared] = [r["loss"] for r in read_metrics(run, "trainer")]
    assert len(losses[True]) == 3
    assert losses[True] == pytest.approx(losses[False], rel=1e-4, abs=1e-6)
