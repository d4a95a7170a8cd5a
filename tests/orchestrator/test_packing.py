"""Packing keeps every token exactly once, respects seq_len, and balances ranks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from prime_rl.orchestrator.outputs import write_step
from prime_rl.orchestrator.packing import PackItem, balance_bins, first_fit_decreasing, pack_step
from prime_rl.transport.batch import read_batch


def _items(n, seed=0, max_len=300):
    rng = random.Random(seed)
    items = []
    for i in range(n):
        L = rng.randint(1, max_len)
        # token ids encode (sample i, position t) so each token is identifiable after packing
        ids = [i * 1000 + t for t in range(L)]
        mask = [t >= L // 3 for t in range(L)]
        lps = [-(i * 1000 + t) / 1e6 if m else 0.0 for t, m in enumerate(mask)]
        items.append(PackItem(ids, mask, lps, advantage=float(i) - n / 2, temperature=0.5 + i / 100))
    return items


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_every_token_exactly_once(ranks, tmp_path):
    items = _items(57, seed=ranks)
    batches = pack_step(items, step=3, seq_len=512, num_ranks=ranks)
    write_step(batches, tmp_path)
    seen = []
    counts = set()
    for r in range(ranks):
        b = read_batch(tmp_path / f"rank_{r}.bin")
        assert b.step == 3 and b.rank == r and b.world_size == ranks
        assert b.total_loss_tokens == sum(sum(it.loss_mask) for it in items)
        counts.add(len(b.micro_batches))
        for mb in b.micro_batches:
            assert len(mb) <= 512
            if mb.num_loss_tokens == 0 and len(mb) == 1:
                continue  # padding
            # split at position resets and check each segment is one whole sample, fields aligned
            starts = list(np.flatnonzero(mb.position_ids == 0)) + [len(mb)]
            for s, e in zip(starts[:-1], starts[1:], strict=True):
                i = int(mb.input_ids[s]) // 1000
                it = items[i]
                assert list(mb.input_ids[s:e]) == it.input_ids
                assert list(mb.position_ids[s:e]) == list(range(e - s))
                assert list(mb.loss_mask[s:e]) == it.loss_mask
                assert np.allclose(mb.inference_logprobs[s:e], it.logprobs)
                assert np.all(mb.advantages[s:e] == np.float32(it.advantage))
                assert np.all(mb.temperature[s:e] == np.float32(it.temperature))
                seen.append(i)
    assert sorted(seen) == list(range(len(items)))  # every sample once, whole
    assert len(counts) == 1  # same number of micro-batches on every rank


def test_ffd_bins_are_valid_and_unmergeable():
    rng = random.Random(1)
    for _ in range(50):
        lengths = [rng.randint(1, 100) for _ in range(rng.randint(1, 30))]
        bins = first_fit_decreasing(lengths, 100)
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in b) <= 100 for b in bins)
        # first-fit property: no two bins could be merged into one (so at most one bin is half full or less)
        sums = [sum(lengths[i] for i in b) for b in bins]
        assert all(sums[a] + sums[b] > 100 for a in range(len(sums)) for b in range(a + 1, len(sums)))


def test_ffd_hand_worked():
    # capacity 10: sorted 7,5,4,3,1 -> [7,3], [5,4,1]
    assert first_fit_decreasing([5, 7, 1, 3, 4], 10) == [[1, 3], [0, 4, 2]]
    with pytest.raises(ValueError, match="seq_len"):
        first_fit_decreasing([11], 10)


def test_balance():
    # bins 10, 9, 8, 7, 1 over 2 ranks: LPT -> {10, 7} = 17 and {9, 8, 1} = 18
    ranks = balance_bins([10, 9, 8, 7, 1], 2)
    loads = sorted(sum([10, 9, 8, 7, 1][b] for b in r) for r in ranks)
    assert loads == [17, 18]
    items = _items(200, seed=7)
    batches = pack_step(items, step=1, seq_len=1024, num_ranks=4)
    loads = [sum(len(mb) for mb in b.micro_batches if mb.num_loss_tokens) for b in batches]
    assert max(loads) - min(loads) <= 1024  # within one micro-batch of each other (LPT bound)
    assert max(loads) / (sum(loads) / 4) < 1.1


def test_empty_step_still_writes_a_micro_batch():
    batches = pack_step([], step=1, seq_len=64, num_ranks=2)
    assert [len(b.micro_batches) for b in batches] == [1, 1] and all(b.total_loss_tokens == 0 for b in batches)


def test_pack_items_takes_trainable_rollouts_only():
    """Every sample of an unmasked, unfiltered rollout, with its rollout's advantage and temperature; masked and
    filtered rollouts carry nothing (docs/design.md invariant 3)."""
    from prime_rl.envs.base import Task
    from prime_rl.orchestrator.packing import pack_items
    from prime_rl.orchestrator.types import Rollout, Sample

    def rollout(n_samples, **kw):
        r = Rollout(task=Task("t", "train", 0, []), source="s", **kw)
        for k in range(n_samples):
            s = Sample()
            s.extend([1, 2], sampled=False)
            s.extend([10 + k], sampled=True, logprobs=[-0.5])
            r.samples.append(s)
        return r

    rs = [rollout(2, advantage=0.5, temperature=0.7), rollout(1, advantage=1.0, masked=True),
          rollout(1, advantage=-1.0, filtered=True), rollout(1, advantage=-0.25)]  # fmt: skip
    items = pack_items(rs)
    assert [(it.input_ids, it.advantage, it.temperature) for it in items] == [
        ([1, 2, 10], 0.5, 0.7), ([1, 2, 11], 0.5, 0.7), ([1, 2, 10], -0.25, 1.0)]
    assert items[0].loss_mask == [False, False, True] and items[0].logprobs == [0.0, 0.0, -0.5]
    # seq-mean-token-mean: 2 rollouts kept, with 2 and 1 loss tokens (N = 3): advantage x N / (R * n_r) ->
    # 0.5 * 3 / (2 * 2) = 0.375 and -0.25 * 3 / (2 * 1) = -0.375, so each rollout weighs the same in total
    seq = pack_items(rs, "seq-mean-token-mean")
    assert [it.advantage for it in seq] == pytest.approx([0.375, 0.375, -0.375])
    with pytest.raises(ValueError, match="loss_aggregation"):
        pack_items(rs, "sequence")


def test_micro_batch_arrays_equal_numpy_conversion_in_every_input_form():
    """`build_micro_batch` converts Python lists through struct/bytes (faster than `np.asarray`); the arrays are
    the ones `np.asarray` gives, also for inputs the fast path refuses (numpy scalars, a mask value of 2, float
    ids), which take `np.asarray` itself."""
    from prime_rl.orchestrator.packing import build_micro_batch

    def plain(items):
        return (np.concatenate([np.asarray(it.input_ids, np.int32) for it in items]),
                np.concatenate([np.asarray(it.loss_mask, bool) for it in items]),
                np.concatenate([np.asarray(it.logprobs, np.float32) for it in items]))  # fmt: skip

    odd = [
        PackItem([np.int64(3), 4], [np.bool_(True), False], [np.float32(-0.5), 0.0], 1.0, 1.0),
        PackItem([3, 4], [2, 0], [-0.5, 0], 1.0, 1.0),
        PackItem([3.0, 4.0], [True, False], [-1e-30, -3.4e38], 1.0, 1.0),
    ]
    for items in (_items(5), _items(3, seed=1, max_len=2000), [odd[0]], [odd[1]], [odd[2]], odd):
        mb = build_micro_batch(items)
        for got, want in zip((mb.input_ids, mb.loss_mask, mb.inference_logprobs), plain(items), strict=True):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes() and got.flags.writeable
