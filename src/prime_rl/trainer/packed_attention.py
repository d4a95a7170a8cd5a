"""Attention over packed micro-batches without a T x T mask: each packed sample attends causally to itself only.

A packed micro-batch holds several samples back to back in one sequence of T tokens, `position_ids` restarting at
0 for each (`transport.batch`). The exact attention of such a sequence is block-diagonal causal. Building that as a
dense [T, T] mask for `sdpa` costs O(T^2) memory and compute however short the samples are, so packing long
micro-batches of short samples lost to padding (`benchmarks/trainer.py`). Here the samples are attended to
separately instead, grouped by length: all samples of one length L go through one `scaled_dot_product_attention`
call as a batch [n, H, L, D] with `is_causal=True` (the variable-length scheme of FlashAttention's `varlen`
kernels, Dao 2023, done with the portable sdpa kernel; cost sum_i L_i^2 instead of T^2). The number of sdpa calls
per layer is the number of distinct sample lengths.

Registered with transformers as the attention implementation `prime_packed` (`AttentionInterface`) with its own
mask function (`AttentionMaskInterface`): for one packed row without a KV cache or padding mask it builds no mask
(the segments come from the `position_ids` every decoder layer passes to its attention); anything else (several
rows, a KV cache as in `shared_prefix`, a padding mask) gets sdpa's mask and sdpa attention, exactly as
`attn_implementation="sdpa"`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional

NAME = "prime_packed"


def sample_spans(position_ids: Tensor) -> list[tuple[int, int]]:
    """[T] positions -> (start, end) of every packed sample, in order (a sample starts where the position is 0, and
    at t = 0)."""
    starts = (position_ids == 0).nonzero().flatten().tolist()
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    ends = [*starts[1:], int(position_ids.shape[0])]
    return list(zip(starts, ends, strict=True))


class PackPlan:
    """Token indices of the packed samples grouped by length: for each distinct length L, `index` [n * L] (the
    tokens of the n samples of that length, sample by sample) and n; `inverse` [T] maps the groups' tokens, laid
    end to end, back to packed order."""

    def __init__(self, position_ids: Tensor):
        spans = sample_spans(position_ids)
        self.num_samples = len(spans)
        self.length = int(position_ids.shape[0])
        by_len: dict[int, list[int]] = {}
        for start, end in spans:
            by_len.setdefault(end - start, []).append(start)
        dev = position_ids.device
        self.groups: list[tuple[int, int, Tensor]] = []  # (L, n, index [n * L]): sample length, samples, tokens
        for sample_len, starts in sorted(by_len.items()):
            offsets = torch.arange(sample_len, device=dev)[None, :]
            idx = (torch.tensor(starts, device=dev)[:, None] + offsets).flatten()
            self.groups.append((sample_len, len(starts), idx))
        self.inverse = torch.argsort(torch.cat([idx for _, _, idx in self.groups]))


_last: tuple[Tensor, PackPlan] | None = None  # the plan of the forward pass running now (all layers share it)


def plan_for(position_ids: Tensor) -> PackPlan:
    """The `PackPlan` of `position_ids` [T] (computed once per forward pass: every layer gets the same tensor)."""
    global _last
    if _last is None or _last[0] is not position_ids:
        _last = (position_ids, PackPlan(position_ids))
    return _last[1]


def packed_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers attention function. query [1, H, T, D], key/value [1, Hkv, T, D] -> ([1, T, H, D], None).

    Causal attention within each packed sample (from `kwargs["position_ids"]`, [1, T]). With an explicit
    `attention_mask`, a batch of several rows, or no `position_ids`, this is transformers' sdpa attention.

    Raises:
        ValueError: dropout > 0 (training here uses none; the grouped calls would not reproduce sdpa's masks).
    """
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    position_ids = kwargs.get("position_ids")
    if attention_mask is not None or position_ids is None or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        # several rows or a KV cache: `packed_mask` gave sdpa's mask (None only where plain causal is exact)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)  # fmt: skip
    if dropout:
        raise ValueError(f"{NAME} attention: dropout {dropout} is not supported")
    n_rep = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    plan = plan_for(position_ids[0])
    if plan.num_samples == 1:
        out = functional.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling)
        return out.transpose(1, 2).contiguous(), None
    _, num_heads, _, head_dim = query.shape
    query_heads, key_heads, value_heads = query[0], key[0], value[0]  # [H, T, D]
    outs = []
    for sample_len, num_samples, idx in plan.groups:
        def take(states: Tensor, idx: Tensor = idx, num_samples: int = num_samples,
                 sample_len: int = sample_len) -> Tensor:  # fmt: skip
            """[H, T, D] -> [n, H, L, D]: the `num_samples` (n) samples of length `sample_len` (L)."""
            states = states.index_select(1, idx).view(num_heads, num_samples, sample_len, head_dim)
            return states.transpose(0, 1)

        group_out = functional.scaled_dot_product_attention(take(query_heads), take(key_heads), take(value_heads),
                                                            is_causal=True, scale=scaling)  # [n, H, L, D]
        outs.append(group_out.transpose(0, 1).reshape(num_heads, num_samples * sample_len, head_dim))
    out = torch.cat(outs, dim=1).index_select(1, plan.inverse)  # back to packed order
    return out.transpose(0, 1).unsqueeze(0).contiguous(), None  # [1, T, H, D]


def packed_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                attention_mask: Tensor | None = None, **kwargs) -> Tensor | None:  # fmt: skip
    """transformers mask function of `prime_packed`: None (no mask: `packed_attention_forward` attends within each
    packed sample) for one row without cache or padding mask; otherwise transformers' `sdpa_mask`."""
    from transformers.masking_utils import sdpa_mask

    if batch_size == 1 and attention_mask is None and q_length == kv_length and q_offset == 0 and kv_offset == 0:
        return None
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, attention_mask=attention_mask, **kwargs)  # fmt: skip


def register() -> str:
    """Register `prime_packed` with transformers' attention and mask interfaces (idempotent); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, packed_attention_forward)
    AttentionMaskInterface.register(NAME, packed_mask)
    return NAME
