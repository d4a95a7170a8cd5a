"""A custom loss (`[trainer.loss] type = "custom"`, `import_path = "tests.trainer.faulty_loss:faulty_loss"`) that
turns non-finite on chosen calls, for the trainer's non-finite tests.

The k-th call of this process (k = 0, 1, ...) computes micro-batch k % per_step of step k // per_step + 1 (the
engine calls the loss once per micro-batch, in order). `cfg.kwargs`: `per_step` (micro-batches per step), `bad`
(a list of [step, micro_batch] pairs, or "all"), `rank` (only on this torchrun rank; default every rank), `mode`:
"loss" (the loss value becomes NaN), "grad" (the loss stays finite, 0 is added, but its gradient is NaN:
d sqrt(|x|) / dx at x = 0) or "inf" (a constant +inf is added: the loss is not finite, its gradient is).
"""

from __future__ import annotations

import itertools
import os

import torch

from prime_rl.trainer.loss import LossOutput, sft_loss

CALLS = itertools.count()


def reset() -> None:
    """Start counting calls from 0 again (tests in one process)."""
    global CALLS
    CALLS = itertools.count()


def faulty_loss(inputs, cfg) -> LossOutput:
    kw = cfg.kwargs
    k = next(CALLS)
    step, mb = k // kw.get("per_step", 2) + 1, k % kw.get("per_step", 2)
    out = sft_loss(inputs)
    bad = kw.get("bad", [])
    here = kw.get("rank") is None or int(os.environ.get("RANK", "0")) == kw["rank"]
    if here and (bad == "all" or [step, mb] in [list(b) for b in bad]):
        lp, mode = inputs.trainer_logprobs, kw.get("mode", "loss")
        if mode == "loss":
            out.loss = out.loss * float("nan")
        elif mode == "inf":
            out.loss = out.loss + float("inf")
        else:
            out.loss = out.loss + torch.sqrt((lp - lp.detach()).abs()).sum()
    return out
