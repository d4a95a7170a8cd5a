"""Optional per-step diagnostics of the RL trainer (`[trainer.diagnostics]`): where does learning stall?

- `kl_to_start`: KL(current policy || starting policy) per loss token, the k3 estimator (Schulman 2020, "Approximating
  KL divergence"): mean over loss tokens of exp(d) - d - 1 with d = log pi_start(a_t) - log pi(a_t), tokens sampled
  from (nearly) the current policy, both at the sampling temperature. The starting policy is `model.name`, run by a
  frozen copy on every micro-batch (one more forward, no backward; an unsharded copy on every rank).
- `entropy/decision`: the mean entropy over loss tokens that are one of `decision_chars` (e.g. GridSim's schedule
  digits), where the policy's choices are made, next to the all-token `entropy` that fixed syntax dilutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from prime_rl.trainer.forward import ForwardOutput, forward_micro_batch


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
        model_dir: the starting model (`model.name`); its copy is loaded only with `kl_to_start`.
        device: where the copy runs. seq_len: the trainer's.
        kl_to_start: log `kl_to_start`. decision_chars: log `entropy/decision` over these characters' tokens.
    """

    def __init__(self, model_dir: str | Path, device: torch.device, seq_len: int, kl_to_start: bool, decision_chars: str):
        self.device, self.seq_len = device, seq_len
        self.start = None
        if kl_to_start:
            from transformers import AutoModelForCausalLM

            self.start = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="sdpa")
            self.start.to(device).eval().requires_grad_(False)
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
        if self.start is not None:
            ref = forward_micro_batch(mb, self.start, index=0, seq_len=self.seq_len, device=self.device)
            d = ref.inputs.trainer_logprobs.detach() - fwd.inputs.trainer_logprobs.detach()
            k3 = torch.where(mask, torch.exp(d) - d - 1, zero.to(d.dtype))
            out["kl_to_start"] = (k3.sum(), mask.sum().float())
        return out


def build_probe(cfg: Any, device: torch.device) -> StepProbe | None:
    """The probe of a TrainerConfig's `[diagnostics]`, or None when nothing is asked for."""
    d = cfg.diagnostics
    if not d.kl_to_start and not d.decision_chars:
        return None
    return StepProbe(cfg.model.name, device, cfg.seq_len, d.kl_to_start, d.decision_chars)
