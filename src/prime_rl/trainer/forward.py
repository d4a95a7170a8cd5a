"""The forward pass of one micro-batch: token ids in, loss inputs out. Each micro-batch kind registers how it runs
the model (`forward_micro_batch.register`): packed `transport.batch.MicroBatch` in `logprobs.py`,
`SharedPrefixMicroBatch` in `shared_prefix.py`. The engine only calls `forward_micro_batch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch
from typing import Any

import torch
from torch import Tensor, nn

from prime_rl.trainer.loss import LossInputs


@dataclass
class ForwardOutput:
    """One micro-batch after the forward pass, flattened to [T] tokens.

    Attributes:
        inputs: the loss inputs (trainer logprobs with grad, inference logprobs, advantages, loss mask), each [T].
        entropy: [T] entropy (nats, no grad) of the tempered next-token distribution at each token.
        token_ids: [T] the token each position predicts (long).
        num_tokens: tokens of the samples, counting a shared prefix once per sample (as packing would).
    """

    inputs: LossInputs
    entropy: Tensor
    token_ids: Tensor
    num_tokens: int


@singledispatch
def forward_micro_batch(mb: Any, model: nn.Module, *, index: int, seq_len: int, device: torch.device) -> ForwardOutput:
    """Run `model` on micro-batch `mb` (number `index` of the step) and return its loss inputs.

    Raises:
        TypeError: no forward is registered for `type(mb)`.
        ValueError: the micro-batch is longer than `seq_len`, a loss token has no prediction (first token of a
            packed sample), a temperature <= 0 or a non-finite inference logprob or advantage on a loss token.
    """
    raise TypeError(f"micro-batch {index}: no forward registered for {type(mb).__name__}")


def check_sampling(index: int, mask: Tensor, temp: Tensor, inf_lp: Tensor, adv: Tensor | None = None) -> None:
    """Raise ValueError when a loss token has temperature <= 0, a non-finite inference logprob or (when given) a
    non-finite advantage. All [T]."""
    if bool((mask & ~(temp > 0)).any()) or not bool(torch.isfinite(inf_lp[mask]).all()):
        raise ValueError(
            f"micro-batch {index}: a loss token has temperature <= 0 or a non-finite inference logprob; "
            "RL needs sampling at temperature > 0 with logprobs returned"
        )
    if adv is not None and not bool(torch.isfinite(adv[mask]).all()):
        raise ValueError(f"micro-batch {index}: a loss token has a non-finite advantage (NaN or inf)")
