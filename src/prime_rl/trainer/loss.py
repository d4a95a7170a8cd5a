"""Losses: a registry of token-level objectives, selected by `[trainer.loss] type`.

A loss is a function `fn(inputs: LossInputs, cfg: LossConfig) -> LossOutput` that returns the SUM over the
tokens of one micro-batch; the engine divides by the step's global count of loss tokens
(`StepBatch.total_loss_tokens`, all micro-batches and ranks), so the result does not depend on how the batch
was cut. `type` is a registered name (`grpo`, `sft`) or an import path `package.module:function`.

Metrics are returned as `(numerator, denominator)` pairs of 0-d tensors; the engine sums both over micro-batches
and ranks and logs `numerator / denominator`, so every logged mean is exact over the whole step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from prime_rl.config.trainer import LossConfig
from prime_rl.registry import Registry


@dataclass
class LossInputs:
    """Per-token inputs of one packed micro-batch, all shape [T].

    `trainer_logprobs[t]` (differentiable) and `inference_logprobs[t]` are both log p(input_ids[t] |
    input_ids[<t]) at the token's sampling temperature; `loss_mask[t]` (bool) selects the trained tokens.
    """

    trainer_logprobs: Tensor
    inference_logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor


@dataclass
class LossOutput:
    """`loss`: 0-d tensor, the sum over this micro-batch's tokens (not yet normalised).
    `metrics`: name -> (numerator, denominator), 0-d float tensors without grad."""

    loss: Tensor
    metrics: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)


LossFn = Callable[[LossInputs, LossConfig], LossOutput]
LOSSES: Registry[LossFn] = Registry("loss", "trainer.loss.type")


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Decorator: make `fn` selectable as `[trainer.loss] type = name`."""
    return LOSSES.register(name)


def get_loss_fn(type_: str) -> LossFn:
    """Resolve a registered name or an import path `module:function`.

    Raises:
        RegistryError (a ValueError): unknown name or unimportable path (names `trainer.loss.type` and the choices).
    """
    return LOSSES.get(type_)


def _frac(mask: Tensor, over: Tensor) -> tuple[Tensor, Tensor]:
    return (mask & over).sum().float().detach(), over.sum().float().detach()


@register_loss("grpo")
def grpo_loss(inputs: LossInputs, cfg: LossConfig) -> LossOutput:
    """Token-level policy gradient with importance ratio against the inference logprobs (sum over tokens).

    With l = clamp(logp_trainer - logp_inference, -c, c) (c = `log_ratio_clamp`), r = exp(l),
    dp = exp(logp_trainer) - exp(logp_inference) and advantage A, per loss token:

        masked  = (A > 0 and dp > delta) or (A < 0 and dp < -delta)      (delta = `trust_region_delta`)
        w       = r, or with `tis_cap`: r * stopgrad(min(r, cap) / r)     (value min(r, cap), grad min(r, cap)*dlogp)
        loss_t  = -[not masked] * A * w + kl_tau * l^2

    i.e. a token is dropped from the policy-gradient term when its probability already moved by more than
    delta in the direction the advantage pushes (the DPPO-style trust region of the reference prime-rl), while
    the kl_tau * l^2 term still pulls it back. Gradient wrt logp_trainer of a kept token: -A * w + 2 kl_tau l
    (zero for the clamp-saturated part when |logp_trainer - logp_inference| > c).

    Metrics: `mismatch_kl` = mean over loss tokens of r - l - 1 (the k3 estimator of KL(inference||trainer));
    `masked_frac` over all loss tokens, `masked_frac_pos`/`masked_frac_neg` over tokens with A > 0 / A < 0;
    `tis_capped_frac` when a cap is set; `ratio` mean over loss tokens.
    """
    lp, lp_inf, adv, mask = inputs.trainer_logprobs, inputs.inference_logprobs, inputs.advantages, inputs.loss_mask
    mask = mask.bool()
    log_ratio = torch.clamp(lp - lp_inf, -cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        dp = torch.exp(lp) - torch.exp(lp_inf)
        pos, neg = adv > 0, adv < 0
        masked_high = pos & (dp > cfg.trust_region_delta)
        masked_low = neg & (dp < -cfg.trust_region_delta)
        keep = mask & ~(masked_high | masked_low)
    weight = ratio
    capped = None
    if cfg.tis_cap is not None:
        with torch.no_grad():
            capped = ratio > cfg.tis_cap
            scale = torch.clamp(ratio, max=cfg.tis_cap) / ratio
        weight = ratio * scale
    zero = torch.zeros((), dtype=lp.dtype, device=lp.device)
    pg = torch.where(keep, adv * weight, zero)
    kl = torch.where(mask, log_ratio.square(), zero)
    loss = (-pg + cfg.kl_tau * kl).sum()
    with torch.no_grad():
        n = mask.sum().float()
        metrics = {
            "mismatch_kl": (torch.where(mask, ratio - log_ratio - 1, zero).sum(), n),
            "ratio": (torch.where(mask, ratio, zero).sum(), n),
            "masked_frac": _frac(masked_high | masked_low, mask),
            "masked_frac_pos": _frac(masked_high, mask & pos),
            "masked_frac_neg": _frac(masked_low, mask & neg),
        }
        if capped is not None:
            metrics["tis_capped_frac"] = _frac(capped, mask)
    return LossOutput(loss=loss, metrics=metrics)


@register_loss("sft")
def sft_loss(inputs: LossInputs, cfg: LossConfig | None = None) -> LossOutput:
    """Negative log-likelihood of the loss tokens (sum): -sum_t mask_t * logp_trainer_t."""
    lp, mask = inputs.trainer_logprobs, inputs.loss_mask.bool()
    nll = torch.where(mask, -lp, torch.zeros((), dtype=lp.dtype, device=lp.device)).sum()
    return LossOutput(loss=nll, metrics={"nll": (nll.detach(), mask.sum().float())})
