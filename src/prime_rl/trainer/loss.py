"""Losses: a registry of token-level objectives, selected by `[trainer.loss] type` (one config class per loss in
`prime_rl.config.trainer`).

A loss is a function `fn(inputs: LossInputs, cfg) -> LossOutput` that returns the SUM over the tokens of one
micro-batch; the engine divides by the step's global count of loss tokens (`StepBatch.total_loss_tokens`, all
micro-batches and ranks), so the result does not depend on how the batch was cut. It is registered with
`register_loss(name, console=...)`, which names the metrics the trainer's console line shows; `type = "custom"`
loads `import_path` (`package.module:function`; console metrics from the function's `console_metrics` attribute).

Metrics are returned as `(numerator, denominator)` pairs of 0-d tensors; the engine sums both over micro-batches
and ranks and logs `numerator / denominator`, so every logged mean is exact over the whole step. A loss may also
return its additive `terms` (name -> 0-d tensor, summing to `loss`); the engine then logs the norm of each term's
gradient with respect to the loss tokens' logprobs (`logp_grad_norm/<term>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from prime_rl.config.trainer import CustomLossConfig, DPPOKLLossConfig, OPDLossConfig
from prime_rl.registry import Registry


@dataclass
class LossInputs:
    """Per-token inputs of one micro-batch, all shape [T] (a shared-prefix micro-batch is flattened to [K*S]).

    `trainer_logprobs[t]` (differentiable) and `inference_logprobs[t]` are both log p(input_ids[t] |
    input_ids[<t]) at the token's sampling temperature; `loss_mask[t]` (bool) selects the trained tokens.
    `ref_logprobs[t]` (no grad) is the same for the reference policy (the starting model), filled by the engine
    when the trainer has one (`prime_rl.trainer.reference`), else None. `teacher_logprobs[t]` (no grad) is the
    teacher's log q(input_ids[t] | input_ids[<t]) (vLLM prompt logprobs, temperature 1; `[orchestrator.teacher]`)
    when the batch carries them, else None.
    """

    trainer_logprobs: Tensor
    inference_logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor
    ref_logprobs: Tensor | None = None
    teacher_logprobs: Tensor | None = None


@dataclass
class LossOutput:
    """`loss`: 0-d tensor, the sum over this micro-batch's tokens (not yet normalised).
    `metrics`: name -> (numerator, denominator), 0-d float tensors without grad.
    `terms`: optional name -> 0-d tensor, the additive parts of `loss` (for gradient-norm diagnostics)."""

    loss: Tensor
    metrics: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)
    terms: dict[str, Tensor] = field(default_factory=dict)


LossFn = Callable[[LossInputs, Any], LossOutput]
LOSSES: Registry[LossFn] = Registry("loss", "trainer.loss.type")


@dataclass(frozen=True)
class Loss:
    """A resolved loss: its function and the metric names the trainer's console line shows (all are logged)."""

    fn: LossFn
    console: tuple[str, ...] = ()

    def __call__(self, inputs: LossInputs, cfg: Any) -> LossOutput:
        return self.fn(inputs, cfg)


def register_loss(name: str, console: tuple[str, ...] = ()) -> Callable[[LossFn], LossFn]:
    """Decorator: make `fn` the loss of `[trainer.loss] type = name` (add its config class to
    `prime_rl.config.trainer.LossConfig`); `console` = the metrics shown on the console line (stored as
    `fn.console_metrics`)."""

    def deco(fn: LossFn) -> LossFn:
        fn.console_metrics = tuple(console)  # type: ignore[attr-defined]
        return LOSSES.register(name)(fn)

    return deco


def get_loss(cfg: Any) -> Loss:
    """The loss selected by a loss config (`cfg.type`; `custom` imports `cfg.import_path`).

    Raises:
        RegistryError (a ValueError): unknown type, or an import path that does not import (names the field).
    """
    if isinstance(cfg, CustomLossConfig):
        fn = LOSSES.get(cfg.import_path, field="trainer.loss.import_path")
    else:
        fn = LOSSES.get(cfg.type)
    return Loss(fn, tuple(getattr(fn, "console_metrics", ())))


def _frac(mask: Tensor, over: Tensor) -> tuple[Tensor, Tensor]:
    return (mask & over).sum().float().detach(), over.sum().float().detach()


def teacher_advantage(inputs: LossInputs, mask: Tensor) -> Tensor:
    """The per-token teacher term log q(t) - log p(t) (no grad; [T]): q the teacher's logprob of the sampled token,
    p the policy's (the trainer's, detached); 0 off the loss tokens. Its mean over the loss tokens is minus the
    sampled estimator of the reverse KL(p || q) (Agarwal et al. 2024, "On-Policy Distillation of Language Models",
    arXiv:2306.13649; Thinking Machines 2025, "On-Policy Distillation").

    Raises:
        ValueError: a micro-batch with loss tokens has no teacher logprobs, or one is NaN/inf on a loss token (the orchestrator masks
            such rollouts, so this is a batch not written by it intact).
    """
    teacher_lp, lp = inputs.teacher_logprobs, inputs.trainer_logprobs.detach()
    if teacher_lp is None and not bool(mask.any()):  # a loss-free padding micro-batch
        return torch.zeros_like(lp)
    if teacher_lp is None:
        raise ValueError("trainer.loss.teacher_kl_coef > 0 needs teacher logprobs in the batch: set "
                         "[orchestrator.teacher] (rl: [teacher]) so the orchestrator scores every rollout with the teacher")  # fmt: skip
    teacher_lp = teacher_lp.to(lp.dtype)
    if not bool(torch.isfinite(teacher_lp[mask]).all()):
        raise ValueError("a teacher logprob is NaN or inf on a loss token; the orchestrator masks such rollouts "
                         "(teacher/non_finite), so this batch was not written by it intact")  # fmt: skip
    return torch.where(mask, teacher_lp - lp, torch.zeros((), dtype=lp.dtype, device=lp.device))


@register_loss("dppo_kl", console=("mismatch_kl", "masked_frac_pos", "masked_frac_neg"))
def dppo_kl_loss(inputs: LossInputs, cfg: DPPOKLLossConfig) -> LossOutput:
    """Token-level policy gradient with importance ratio against the inference logprobs, a DPPO-style trust region
    and a KL term (sum over tokens); `loss.type = "dppo_kl"` (`"grpo"` is a deprecated alias).

    With l = clamp(logp_trainer - logp_inference, -c, c) (c = `log_ratio_clamp`), r = exp(l),
    dp = exp(logp_trainer) - exp(logp_inference) and advantage A, per loss token:

        masked  = (A > 0 and dp > delta) or (A < 0 and dp < -delta)      (delta = `trust_region_delta`)
        w       = r, or with `tis_cap`: r * stopgrad(min(r, cap) / r)     (value min(r, cap), grad min(r, cap)*dlogp)
        loss_t  = -[not masked] * A * w + kl_tau * l^2

    i.e. a token is dropped from the policy-gradient term when its probability already moved by more than
    delta in the direction the advantage pushes (the DPPO-style trust region of the reference prime-rl), while
    the kl_tau * l^2 term still pulls it back. Gradient wrt logp_trainer of a kept token: -A * w + 2 kl_tau l
    (zero for the clamp-saturated part when |logp_trainer - logp_inference| > c).

    With `ref_kl_coef` = beta > 0, a KL penalty to the reference policy (the starting model) is added per loss token:

        d       = clamp(logp_ref - logp_trainer, -c, c)
        loss_t += beta * (exp(d) - d - 1)                                  (gradient wrt logp_trainer: beta * (1 - e^d))

    the k3 estimator of KL(pi || pi_ref) (Schulman 2020, "Approximating KL divergence") as GRPO adds it (Shao et al.
    2024, "DeepSeekMath", eq. 3-4; TRL `beta`, verl `kl_loss_type = "low_var_kl"`). Unlike the policy-gradient
    term it acts on steps whose advantages are all 0 too: when every rollout fails the same way, it is what pulls
    the policy back toward the starting model.

    With `teacher_kl_coef` = c > 0 or `adv_tau` != 1 (on-policy distillation; `type = "opd"` is this loss with c = 1,
    adv_tau = 0), the advantage A of every formula above is the per-token

        A_t     = adv_tau * A + c * (log q_t - stopgrad(logp_trainer_t))

    with q_t the teacher's logprob of the sampled token (`teacher_advantage`): log p - log q is the sampled
    estimator of the reverse KL(p || q) at that token, so the policy gradient with this reward lowers the per-token
    reverse KL to the teacher (Agarwal et al. 2024, "On-Policy Distillation of Language Models", arXiv:2306.13649;
    Lu and Thinking Machines Lab 2025, "On-Policy Distillation"; the reference prime-rl's `ref_kl` loss). The
    trust-region mask reads the sign of A_t.

    Metrics: `mismatch_kl` = mean over loss tokens of r - l - 1 (the k3 estimator of KL(inference||trainer));
    `teacher_kl` = mean over loss tokens of logp_trainer - log q (with a teacher term);
    `ref_kl` = mean over loss tokens of the k3 above (with `ref_kl_coef > 0`);
    `masked_frac` over all loss tokens, `masked_frac_pos`/`masked_frac_neg` over tokens with A > 0 / A < 0;
    `tis_capped_frac` when a cap is set; `ratio` mean over loss tokens.
    """
    lp, lp_inf, adv, mask = inputs.trainer_logprobs, inputs.inference_logprobs, inputs.advantages, inputs.loss_mask
    mask = mask.bool()
    teacher = None
    if cfg.teacher_kl_coef > 0:
        teacher = teacher_advantage(inputs, mask)
        adv = cfg.adv_tau * adv.to(lp.dtype) + cfg.teacher_kl_coef * teacher
    elif cfg.adv_tau != 1.0:
        adv = cfg.adv_tau * adv
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
    pg_term, kl_term = -pg.sum(), cfg.kl_tau * kl.sum()
    loss = (-pg + cfg.kl_tau * kl).sum()
    terms = {"pg": pg_term, "kl": kl_term}
    ref_k3 = None
    if cfg.ref_kl_coef > 0:
        if inputs.ref_logprobs is None:
            raise ValueError("trainer.loss.ref_kl_coef > 0 needs reference logprobs: the engine ran without a reference "
                             "policy (prime_rl.trainer.reference.build_reference)")
        ref_log_ratio = torch.clamp(inputs.ref_logprobs.to(lp.dtype) - lp, -cfg.log_ratio_clamp, cfg.log_ratio_clamp)
        ref_k3 = torch.where(mask, torch.exp(ref_log_ratio) - ref_log_ratio - 1, zero)
        terms["ref_kl"] = cfg.ref_kl_coef * ref_k3.sum()
        loss = loss + terms["ref_kl"]
    with torch.no_grad():
        num_loss_tokens = mask.sum().float()
        metrics = {
            "mismatch_kl": (torch.where(mask, ratio - log_ratio - 1, zero).sum(), num_loss_tokens),
            "ratio": (torch.where(mask, ratio, zero).sum(), num_loss_tokens),
            "masked_frac": _frac(masked_high | masked_low, mask),
            "masked_frac_pos": _frac(masked_high, mask & pos),
            "masked_frac_neg": _frac(masked_low, mask & neg),
        }
        if capped is not None:
            metrics["tis_capped_frac"] = _frac(capped, mask)
        if ref_k3 is not None:
            metrics["ref_kl"] = (ref_k3.sum().detach(), num_loss_tokens)
        if teacher is not None:
            metrics["teacher_kl"] = (-teacher.sum(), num_loss_tokens)
    return LossOutput(loss=loss, metrics=metrics, terms=terms)


@register_loss("sft")
def sft_loss(inputs: LossInputs, cfg: Any = None) -> LossOutput:
    """Negative log-likelihood of the loss tokens (sum): -sum_t mask_t * logp_trainer_t."""
    lp, mask = inputs.trainer_logprobs, inputs.loss_mask.bool()
    nll = torch.where(mask, -lp, torch.zeros((), dtype=lp.dtype, device=lp.device)).sum()
    return LossOutput(loss=nll, metrics={"nll": (nll.detach(), mask.sum().float())})


@register_loss("opd", console=("teacher_kl", "mismatch_kl", "masked_frac"))
def opd_loss(inputs: LossInputs, cfg: OPDLossConfig) -> LossOutput:
    """On-policy distillation (`loss.type = "opd"`): `dppo_kl_loss` with `OPDLossConfig`'s defaults
    (teacher_kl_coef = 1, adv_tau = 0), i.e. each loss token's advantage is log q_t - logp_trainer_t (detached), the
    negated sampled reverse KL to the teacher; see `dppo_kl_loss` for the formula and its sources. Raises
    ValueError without teacher logprobs (`teacher_advantage`)."""
    return dppo_kl_loss(inputs, cfg)
