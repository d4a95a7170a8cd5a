"""Optional per-step diagnostics of the RL trainer (`[trainer.diagnostics]`): where does learning stall?

- `kl_to_start`: KL(current policy || starting policy) per loss token, the k3 estimator (Schulman 2020, "Approximating
  KL divergence"): mean over loss tokens of exp(d) - d - 1 with d = log pi_start(a_t) - log pi(a_t), tokens sampled
  from (nearly) the current policy, both at the sampling temperature. The starting policy is `model.name`, run by
  the trainer's reference policy (`prime_rl.trainer.reference`: a frozen copy, one more forward per micro-batch, no
  backward, an unsharded copy on every rank), whose logprobs the engine puts in `LossInputs.ref_logprobs`. With
  `kl_to_start_interval = N` it is logged on step 1 and every N-th step only, and the extra forward runs on those
  steps only (`prime_rl.trainer.reference.reference_due`).
- `entropy/decision`: the mean entropy over loss tokens that are one of `decision_chars` (e.g. GridSim's schedule
  digits), where the policy's choices are made, next to the all-token `entropy` that fixed syntax dilutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from prime_rl.trainer.forward import ForwardOutput


def decision_token_ids(model_dir: str | Path, chars: str) -> list[int]:
    """Token ids of the characters in `chars` that the model's tokenizer encodes as one token each.

    Raises:
        ValueError: none of them is a single token (the diagnostic would measure nothing).
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = sorted({e[0] for c in chars if len(e := tok.encode(c, add_special_tokens=False)) == 1})
    if not ids:
        raise ValueError(f"diagnostics.decision_chars = {chars!r}: no character is a single token of {model_dir}")
    return ids


class StepProbe:
    """Callable `(forward output, micro-batch) -> {metric: (numerator, denominator)}` for `Engine.train_step`.

    Args:
        model_dir: the starting model (`model.name`), whose tokenizer maps `decision_chars` to token ids.
        device: where the metrics are computed.
        kl_to_start: log `kl_to_start` from the forward output's `inputs.ref_logprobs` (the engine fills them when
            the trainer has a reference policy; `build_reference` makes one whenever `kl_to_start` is set).
        decision_chars: log `entropy/decision` over these characters' tokens.
    """

    def __init__(self, model_dir: str | Path, device: torch.device, kl_to_start: bool, decision_chars: str):
        self.kl_to_start = kl_to_start
        self.decision = (
            torch.tensor(decision_token_ids(model_dir, decision_chars), device=device) if decision_chars else None
        )

    def __call__(self, fwd: ForwardOutput, mb: Any) -> dict[str, tuple[Tensor, Tensor]]:
        mask = fwd.inputs.loss_mask.bool()
        out: dict[str, tuple[Tensor, Tensor]] = {}
        zero = torch.zeros((), device=mask.device)
        if self.decision is not None:
            sel = mask & torch.isin(fwd.token_ids, self.decision)
            out["entropy/decision"] = (torch.where(sel, fwd.entropy, zero).sum(), sel.sum().float())
        ref_lp = fwd.inputs.ref_logprobs
        if self.kl_to_start and ref_lp is not None:  # None: a step between kl_to_start_interval's (reference_due)
            ref_log_ratio = ref_lp.detach() - fwd.inputs.trainer_logprobs.detach()
            k3 = torch.where(mask, torch.exp(ref_log_ratio) - ref_log_ratio - 1, zero.to(ref_log_ratio.dtype))
            out["kl_to_start"] = (k3.sum(), mask.sum().float())
        return out


def build_probe(cfg: Any, device: torch.device) -> StepProbe | None:
    """The probe of a TrainerConfig's `[diagnostics]`, or None when nothing is asked for."""
    diagnostics = cfg.diagnostics
    if not diagnostics.kl_to_start and not diagnostics.decision_chars:
        return None
    return StepProbe(cfg.model.name, device, diagnostics.kl_to_start, diagnostics.decision_chars)
