"""The reference policy of the RL trainer: a frozen copy of the starting model (`model.name`), run on every
micro-batch (one more forward, no backward) when the loss's reference-KL term (`[trainer.loss] ref_kl_coef > 0`)
or the `kl_to_start` diagnostic needs its logprobs.

The reference is the model the run started from, also after a resume (a checkpoint's weights are the policy, never
the reference), as in GRPO (Shao et al. 2024, "DeepSeekMath", eq. 3-4: pi_ref is the initial policy), TRL's `beta`
and verl's `use_kl_loss`. Every rank holds an unsharded copy: fine for the models this runs on CPU, and a cost to
know about for large ones under FSDP2 (memory of one more full model per rank).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from prime_rl.trainer.forward import forward_micro_batch


class ReferencePolicy:
    """Callable `micro-batch -> [T] reference logprobs` (float, no grad), aligned with the trainer's
    `ForwardOutput.inputs.trainer_logprobs` of the same micro-batch: log pi_ref(token t | tokens < t) at the token's
    sampling temperature, through the same `forward_micro_batch` (packing, shared prefix) as the policy.

    Args:
        model_dir: the starting model (`model.name`), loaded in float32 with SDPA attention.
        device: where the copy runs. seq_len: the longest micro-batch accepted (the trainer's).
    """

    def __init__(self, model_dir: str | Path, device: torch.device, seq_len: int):
        from transformers import AutoModelForCausalLM

        self.device, self.seq_len = device, seq_len
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="sdpa")
        self.model.to(device).eval().requires_grad_(False)

    @torch.no_grad()
    def __call__(self, mb: Any) -> Tensor:
        out = forward_micro_batch(mb, self.model, index=0, seq_len=self.seq_len, device=self.device)
        return out.inputs.trainer_logprobs.detach()


def has_ref_kl(cfg: Any) -> bool:
    """Whether a TrainerConfig's loss has a reference-KL term (`ref_kl_coef > 0`; a custom loss has none)."""
    return float(getattr(cfg.loss, "ref_kl_coef", 0.0)) > 0


def uses_reference(cfg: Any) -> bool:
    """Whether a TrainerConfig needs the reference policy: a loss with `ref_kl_coef > 0` or the `kl_to_start`
    diagnostic."""
    return has_ref_kl(cfg) or bool(cfg.diagnostics.kl_to_start)


def reference_due(cfg: Any, step: int) -> bool:
    """Whether step `step` (1-based) runs the reference policy: on every step for a reference-KL term, else on the
    steps `kl_to_start` is logged (step 1 and every `diagnostics.kl_to_start_interval`-th step)."""
    if has_ref_kl(cfg):
        return True
    diagnostics = cfg.diagnostics
    return bool(diagnostics.kl_to_start) and (step == 1 or step % diagnostics.kl_to_start_interval == 0)


def build_reference(cfg: Any, device: torch.device) -> ReferencePolicy | None:
    """The reference policy a TrainerConfig needs (`uses_reference`), or None."""
    if not uses_reference(cfg):
        return None
    return ReferencePolicy(cfg.model.name, device, cfg.seq_len)
