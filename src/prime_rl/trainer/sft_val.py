"""SFT validation loss (`[val]`): the NLL of the validation split's loss tokens without gradients.

The validation samples are taken in their fixed order (no shuffle): batch b holds samples b*batch_size ...
(b+1)*batch_size-1, the first `num_batches` batches (all with None) are packed (`sft_data.pack_samples`) and dealt
across ranks like a training step; `val/loss` = sum over those tokens of -log p / their count (all ranks), the
same per-token NLL as the training loss, and `val/perplexity` = exp(min(val/loss, 20)) (the reference's names).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from prime_rl.trainer.dist import all_reduce_sum
from prime_rl.trainer.forward import forward_micro_batch
from prime_rl.trainer.loss import sft_loss
from prime_rl.trainer.sft_data import SFTDataError, SFTSample, pack_samples, shard_micro_batches


def validation_batches(samples: list[SFTSample], batch_size: int, num_batches: int | None) -> list[SFTSample]:
    """The samples one validation pass reads: the first `num_batches` * `batch_size` (all with None), in order."""
    if num_batches is None:
        return list(samples)
    return list(samples[: num_batches * batch_size])


@torch.no_grad()
def validation_loss(
    engine: Any, samples: list[SFTSample], batch_size: int, num_batches: int | None, seq_len: int, pad_id: int = 0
) -> dict[str, float]:
    """`val/loss`, `val/perplexity` and `val/loss_tokens` of one validation pass (collective: every rank calls it
    with the same samples). The weights, gradients and optimizer state are untouched.

    Raises:
        ValueError: the validation samples hold no loss token.
    """
    chosen = validation_batches(samples, batch_size, num_batches)
    mbs = []
    for i in range(0, len(chosen), batch_size):
        mbs.extend(pack_samples(chosen[i : i + batch_size], seq_len))
    mine = shard_micro_batches(mbs, engine.dist.rank, engine.dist.world_size, pad_id)
    nll, tokens = 0.0, 0.0
    for i, mb in enumerate(mine):
        fwd = forward_micro_batch(mb, engine.model, index=i, seq_len=engine.max_tokens, device=engine.dist.device)
        out = sft_loss(fwd.inputs)
        nll += float(out.loss)
        tokens += float(fwd.inputs.loss_mask.sum())
    vec = all_reduce_sum(torch.tensor([nll, tokens], dtype=torch.float64))
    nll, tokens = vec[0].item(), vec[1].item()
    if tokens == 0:
        raise SFTDataError("the validation split has no loss tokens (check data.loss_mask and val.data)")
    loss = nll / tokens
    return {"val/loss": loss, "val/perplexity": math.exp(min(loss, 20.0)), "val/loss_tokens": tokens}
