"""Per-token logprobs of a packed micro-batch at the sampling temperature.

Alignment (the same as `MicroBatch.inference_logprobs`): `logprobs[t] = log p(input_ids[t] | input_ids[<t] of
the same packed sample)`, computed as `log_softmax(logits[t-1] / temperature[t])[input_ids[t]]` — the logits at
position t-1 predict token t, divided by the temperature token t was sampled at. This equals vLLM's
`--logprobs-mode processed_logprobs` without top-k/top-p. Positions that start a packed sample
(`position_ids[t] == 0`, and t == 0) have no prediction: their logprob and entropy are 0, and they must not be
loss tokens.

Packed samples never attend to each other: with the trainer's `prime_packed` attention (`packed_attention`) or
flash-attention the model gets `position_ids` only and attends within each sample (no mask); with plain
`sdpa`/`eager` attention it gets an explicit block-diagonal causal 4-D mask built from `position_ids` (none when
the micro-batch is one sample: plain causal attention).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from prime_rl.trainer.forward import ForwardOutput, check_sampling, forward_micro_batch
from prime_rl.trainer.loss import LossInputs
from prime_rl.transport.batch import MicroBatch


def sample_ids(position_ids: Tensor) -> Tensor:
    """[T] int -> [T] int: index of the packed sample each token belongs to (a new sample starts where
    `position_ids` is 0)."""
    starts = position_ids == 0
    starts[0] = True
    return torch.cumsum(starts.long(), 0) - 1


def packed_causal_mask(position_ids: Tensor) -> Tensor:
    """[T] -> [1, 1, T, T] bool, True = may attend: causal and within the same packed sample."""
    seg = sample_ids(position_ids)
    num_tokens = seg.shape[0]
    causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=seg.device).tril()
    same = seg[:, None] == seg[None, :]
    return (causal & same)[None, None]


def is_single_sample(position_ids: Tensor) -> bool:
    """[T] -> True when the sequence is one sample with positions 0..T-1: then plain causal attention is exact and
    no T x T mask is needed (sdpa takes its faster `is_causal` path)."""
    num_tokens = position_ids.shape[0]
    return num_tokens > 0 and bool((position_ids == torch.arange(num_tokens, device=position_ids.device)).all())


def attends_within_samples(model: nn.Module) -> bool:
    """Whether the model's attention separates packed samples by `position_ids` alone (flash-attention's varlen
    kernels, or `prime_packed`), so no mask must be built."""
    from prime_rl.trainer.packed_attention import NAME

    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    return "flash" in impl or impl == NAME


def forward_logits(model: nn.Module, input_ids: Tensor, position_ids: Tensor) -> Tensor:
    """Run the causal LM on one packed sequence. input_ids, position_ids: [T] -> logits [T, V] (fp32)."""
    kwargs = {"input_ids": input_ids[None], "position_ids": position_ids[None], "use_cache": False}
    if not attends_within_samples(model) and not is_single_sample(position_ids):
        kwargs["attention_mask"] = packed_causal_mask(position_ids)
    out = model(**kwargs)
    return out.logits[0].float()


def token_logprobs(logits: Tensor, input_ids: Tensor, position_ids: Tensor, temperature: Tensor) -> tuple[Tensor, Tensor]:
    """Logprob and entropy of each token at its sampling temperature.

    Args:
        logits: [T, V] model outputs (logits[t] predicts token t+1).
        input_ids, position_ids: [T] int.
        temperature: [T] float > 0, the temperature token t was sampled at.

    Returns:
        (logprobs [T], entropy [T]): logprobs[t] = log_softmax(logits[t-1] / temperature[t])[input_ids[t]];
        entropy[t] (no grad) of that same tempered distribution, in nats. Both 0 where a sample starts.
    """
    num_tokens = input_ids.shape[0]
    scaled = logits[:-1] / temperature[1:, None].to(logits.dtype)
    logp_all = torch.log_softmax(scaled, dim=-1)
    lp = logp_all.gather(-1, input_ids[1:, None].long())[:, 0]
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    starts = position_ids[1:] == 0
    zero = torch.zeros((), dtype=lp.dtype, device=lp.device)
    lp = torch.where(starts, zero, lp)
    ent = torch.where(starts, zero, ent)
    pad = torch.zeros(1, dtype=lp.dtype, device=lp.device)
    if num_tokens == 0:
        return lp, ent
    return torch.cat([pad, lp]), torch.cat([pad, ent])


def compute_logprobs(
    model: nn.Module, input_ids: Tensor, position_ids: Tensor, temperature: Tensor
) -> tuple[Tensor, Tensor]:
    """Forward + `token_logprobs`: [T] inputs -> (logprobs [T] with grad, entropy [T])."""
    logits = forward_logits(model, input_ids, position_ids)
    return token_logprobs(logits, input_ids, position_ids, temperature)


@forward_micro_batch.register
def _(mb: MicroBatch, model: nn.Module, *, index: int, seq_len: int, device: torch.device) -> ForwardOutput:
    """A packed micro-batch: one forward over its [T] tokens (`compute_logprobs`)."""
    if len(mb) > seq_len:
        raise ValueError(f"micro-batch {index} has {len(mb)} tokens > seq_len = {seq_len}")
    ids = torch.from_numpy(mb.input_ids).long().to(device)
    pos = torch.from_numpy(mb.position_ids).long().to(device)
    mask = torch.from_numpy(mb.loss_mask).to(device)
    starts = pos == 0
    starts[0] = True
    if bool((mask & starts).any()):
        raise ValueError(
            f"micro-batch {index}: loss_mask is true at a sample's first token (position_ids == 0), "
            "which has no prediction; the first token of each sample must be a prompt token"
        )
    temp = torch.from_numpy(mb.temperature).float().to(device)
    inf_lp = torch.from_numpy(mb.inference_logprobs).float().to(device)
    adv = torch.from_numpy(mb.advantages).float().to(device)
    check_sampling(index, mask, temp, inf_lp, adv)
    temp = torch.where(temp > 0, temp, torch.ones_like(temp))  # non-loss tokens: any value is harmless
    lp, ent = compute_logprobs(model, ids, pos, temp)
    teacher = None if mb.teacher_logprobs is None else torch.from_numpy(mb.teacher_logprobs).float().to(device)
    return ForwardOutput(LossInputs(lp, inf_lp, adv, mask, teacher_logprobs=teacher), ent, ids, len(mb))
