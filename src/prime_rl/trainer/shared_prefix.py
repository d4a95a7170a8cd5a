"""Shared-prefix micro-batches: K samples that begin with the same P tokens run the prefix once.

Tool-calling chat data repeat a long constant head in every sample (system prompt, the template's tools block:
~880 of ~1,500 byte tokens per GridSim demonstration). Packing runs it K times; here the prefix runs once with
its key/value cache kept in the autograd graph, the cache is repeated K times, and the K suffixes run as one
right-padded [K, S] batch that attends to the cached prefix (causal attention, positions P..P+S-1). The
logprobs are those of K separate forwards of prefix + suffix_k (tests/trainer/test_shared_prefix.py checks
values and gradients against `logprobs.compute_logprobs`), at roughly (P + K*S) / (K*(P + S)) of the token
compute. Right padding needs no attention mask: pads come after every real token, so causal attention never
lets a real token see one.

Used by `sft` with `data.shared_prefix = true`. Same idea as prefix sharing in RL trainers for a group's
common prompt (e.g. "prefix grouper" / shared-prompt batching); not used by the RL path here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn


@dataclass
class SharedPrefixMicroBatch:
    """K samples with a common prefix.

    Attributes:
        prefix_ids: [P] int, P >= 1, the tokens every sample starts with (no loss token among them).
        suffix_ids: [K, S] int, each sample's remaining tokens, right-padded with `pad_id`.
        valid: [K, S] bool, true on real (non-pad) suffix tokens.
        loss_mask: [K, S] bool, the suffix tokens trained on (a subset of `valid`).
    """

    prefix_ids: np.ndarray
    suffix_ids: np.ndarray
    valid: np.ndarray
    loss_mask: np.ndarray

    def __post_init__(self) -> None:
        k, s = self.suffix_ids.shape
        if len(self.prefix_ids) < 1:
            raise ValueError("shared prefix must hold at least one token")
        if self.valid.shape != (k, s) or self.loss_mask.shape != (k, s):
            raise ValueError(f"valid {self.valid.shape} and loss_mask {self.loss_mask.shape} must be [K, S] = {(k, s)}")
        if bool((self.loss_mask & ~self.valid).any()):
            raise ValueError("loss_mask is true on a padding token")

    def __len__(self) -> int:
        """Tokens the model runs: P + K * S."""
        return len(self.prefix_ids) + self.suffix_ids.size

    @property
    def sample_len(self) -> int:
        """Length of the longest sample: P + S."""
        return len(self.prefix_ids) + self.suffix_ids.shape[1]

    @property
    def num_samples(self) -> int:
        return int(self.suffix_ids.shape[0])


def common_prefix_len(seqs: Sequence[np.ndarray], loss_masks: Sequence[np.ndarray]) -> int:
    """Length P of the longest common prefix of `seqs` ([L_k] int each) that holds no loss token and leaves at
    least one token in every sample's suffix (so P <= min L_k - 1). 0 when the first tokens differ."""
    n = min(len(s) for s in seqs) - 1
    if n <= 0:
        return 0
    first = np.asarray(seqs[0][:n])
    p = n
    for s in seqs[1:]:
        diff = np.nonzero(np.asarray(s[:p]) != first[:p])[0]
        if len(diff):
            p = int(diff[0])
    for m in loss_masks:
        hit = np.nonzero(np.asarray(m[:p]))[0]
        if len(hit):
            p = int(hit[0])
    return p


def make_shared_prefix_batch(
    input_ids: Sequence[np.ndarray], loss_masks: Sequence[np.ndarray], pad_id: int = 0
) -> SharedPrefixMicroBatch | None:
    """Build one micro-batch from K samples (`input_ids[k]`, `loss_masks[k]`: [L_k]); None when they share no
    prefix (P = 0): pack those instead."""
    p = common_prefix_len(input_ids, loss_masks)
    if p == 0:
        return None
    s = max(len(x) for x in input_ids) - p
    k = len(input_ids)
    suffix = np.full((k, s), pad_id, dtype=np.int64)
    valid = np.zeros((k, s), bool)
    loss = np.zeros((k, s), bool)
    for i, (ids, m) in enumerate(zip(input_ids, loss_masks, strict=True)):
        n = len(ids) - p
        suffix[i, :n] = ids[p:]
        valid[i, :n] = True
        loss[i, :n] = m[p:]
    return SharedPrefixMicroBatch(np.asarray(input_ids[0][:p], dtype=np.int64), suffix, valid, loss)


def shared_prefix_logprobs(
    model: nn.Module, mb: SharedPrefixMicroBatch, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Logprob and entropy of every suffix token at temperature 1.

    Returns:
        (logprobs [K, S] with grad, entropy [K, S] no grad, nats): logprobs[k, j] = log p(suffix[k, j] |
        prefix, suffix[k, <j]); 0 on padding. The first suffix token is predicted by the prefix's last logits.
    """
    prefix = torch.from_numpy(mb.prefix_ids).long().to(device)
    suffix = torch.from_numpy(mb.suffix_ids).long().to(device)
    valid = torch.from_numpy(mb.valid).to(device)
    p = prefix.shape[0]
    k, s = suffix.shape
    head = model(input_ids=prefix[None], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(k)  # [1, heads, P, d] -> [K, heads, P, d], still in the graph
    pos = (p + torch.arange(s, device=device))[None].expand(k, s)
    tail = model(input_ids=suffix, position_ids=pos, past_key_values=cache, use_cache=False)
    logits = torch.cat([head.logits[:, -1:].expand(k, 1, -1), tail.logits[:, :-1]], dim=1).float()
    logp_all = torch.log_softmax(logits, dim=-1)
    lp = logp_all.gather(-1, suffix[..., None])[..., 0]
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros((), dtype=lp.dtype, device=lp.device)
    return torch.where(valid, lp, zero), torch.where(valid, ent, zero)
