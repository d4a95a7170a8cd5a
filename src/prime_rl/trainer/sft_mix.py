"""SFT sample order over one or several datasets (`[[data.source]]`) and the held-out validation split.

Mixing: sample c (0-based, over the whole run: step N holds c = (N-1)*batch_size ... N*batch_size-1) comes from
source s with probability w_s / sum(w): u_c is the c-th float of `numpy.random.default_rng(seed)` and the source is
the first s with u_c < cumsum(p)_s. Within source s, the k-th sample drawn from it is position k of that source's
stream of epoch permutations (`sft_data.step_indices`' rule, seeded with seed + 7919 * (s + 1) + epoch). Both are
pure functions of (seed, weights, sizes, c), so a resumed run draws the same samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from prime_rl.trainer.sft_data import SFTDataError


def held_out_split(num_rows: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train rows, validation rows) of `num_rows` rows: the first max(1, round(fraction * num_rows)) rows of a
    permutation seeded with `seed` are held out; both lists ascending.

    Raises:
        SFTDataError: fewer than 2 rows, so one side would be empty (names val.fraction).
    """
    num_held = max(1, round(fraction * num_rows))
    if num_rows - num_held < 1:
        raise SFTDataError(f"val.fraction = {fraction} of {num_rows} rows leaves no training rows: add rows or "
                           "lower it")
    perm = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(perm[num_held:]), sorted(perm[:num_held])


def _stream_index(draw: int, size: int, seed: int, shuffle: bool, perms: dict[int, list[int]]) -> int:
    epoch, pos = divmod(draw, size)
    if epoch not in perms:
        gen = torch.Generator().manual_seed(seed + epoch)
        perms[epoch] = torch.randperm(size, generator=gen).tolist() if shuffle else list(range(size))
    return perms[epoch][pos]


class Mixture:
    """Which (source, row) each sample of a step is, for sources of `sizes` rows drawn with `weights`."""

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], seed: int, shuffle: bool = True):
        if len(sizes) != len(weights) or not sizes:
            raise ValueError("Mixture needs one weight per source and at least one source")
        if min(sizes) < 1:
            raise ValueError(f"every source needs at least one row (sizes {list(sizes)})")
        probs = np.asarray(weights, dtype=np.float64)
        if not (np.isfinite(probs).all() and (probs > 0).all()):
            raise ValueError(f"source weights must be finite and > 0 (got {list(weights)})")
        self.sizes = list(sizes)
        self.p = probs / probs.sum()
        self.cdf = np.cumsum(self.p)
        self.cdf[-1] = 1.0
        self.seed, self.shuffle = seed, shuffle
        self._draws = np.zeros(0, dtype=np.int64)
        self._perms: list[dict[int, list[int]]] = [{} for _ in sizes]

    def sources(self, count: int) -> np.ndarray:
        """[count] int: the source of samples 0 .. count-1 (a prefix of one fixed sequence)."""
        if count > len(self._draws):
            uniform = np.random.default_rng(self.seed).random(max(count, 2 * len(self._draws)))
            self._draws = np.searchsorted(self.cdf, uniform, side="right").astype(np.int64)
        return self._draws[:count]

    def step(self, step: int, batch_size: int) -> list[tuple[int, int]]:
        """(source, row within that source) of each sample of optimizer step `step` (1-based)."""
        lo, hi = (step - 1) * batch_size, step * batch_size
        draws = self.sources(hi)
        seen = np.bincount(draws[:lo], minlength=len(self.sizes)).tolist()
        out = []
        for source in draws[lo:hi].tolist():
            seed = self.seed + 7919 * (source + 1)
            row = _stream_index(seen[source], self.sizes[source], seed, self.shuffle, self._perms[source])
            out.append((source, row))
            seen[source] += 1
        return out

