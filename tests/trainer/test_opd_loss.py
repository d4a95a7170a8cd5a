"""On-policy distillation in the loss (`[trainer.loss] type = "opd"`, or `teacher_kl_coef` on `dppo_kl`): value and
gradient against an independent float64 loop over [batch, seq] tensors, masks, non-finite teacher logprobs, and
the optional `teacher_logprobs` field of the batch format."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prime_rl.config.trainer import DPPOKLLossConfig, OPDLossConfig, TrainerConfig
from prime_rl.trainer.loss import LossInputs, dppo_kl_loss, get_loss
from prime_rl.transport.batch import (
    BatchFormatError,
    MicroBatch,
    StepBatch,
    concat_micro_batches,
    decode_batch,
    encode_batch,
)

B, S = 3, 6


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """[B, S] float64 logprobs of student (trainer), inference and teacher, advantages (per row) and a loss mask
    with prompt tokens off; inference differs from trainer by up to +-0.6 nats so the trust region masks some."""
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, S, generator=g, dtype=torch.float64) * 2.5 - 0.05
    inf = lp + (torch.rand(B, S, generator=g, dtype=torch.float64) - 0.5) * 1.2
    inf = torch.clamp(inf, max=-1e-3)
    teacher = -torch.rand(B, S, generator=g, dtype=torch.float64) * 3.0 - 0.01
    adv = torch.tensor([[1.0], [-0.5], [0.0]], dtype=torch.float64).expand(B, S).clone()
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[:, :2] = False  # prompt
    mask[1, 5] = False  # a tool token
    return {"lp": lp, "inf": inf, "teacher": teacher, "adv": adv, "mask": mask}


def _reference(t: dict[str, torch.Tensor], cfg: DPPOKLLossConfig) -> tuple[float, list[list[float]], float]:
    """Loss, d loss / d logp_trainer ([B][S]) and the mean teacher KL, token by token in Python floats."""
    loss, kl_sum, n = 0.0, 0.0, 0
    grad = [[0.0] * S for _ in range(B)]
    for b in range(B):
        for s in range(S):
            if not t["mask"][b, s]:
                continue
            lp, inf, q, a = (float(t[k][b, s]) for k in ("lp", "inf", "teacher", "adv"))
            adv = cfg.adv_tau * a + cfg.teacher_kl_coef * (q - lp)  # the teacher term, detached
            c = cfg.log_ratio_clamp
            l = min(max(lp - inf, -c), c)  # noqa: E741
            r = math.exp(l)
            dp = math.exp(lp) - math.exp(inf)
            masked = (adv > 0 and dp > cfg.trust_region_delta) or (adv < 0 and dp < -cfg.trust_region_delta)
            keep = 0.0 if masked else 1.0
            loss += -keep * adv * r + cfg.kl_tau * l * l
            grad[b][s] = -keep * adv * r + 2 * cfg.kl_tau * l
            kl_sum += lp - q
            n += 1
    return loss, grad, kl_sum / n


def _inputs(t: dict[str, torch.Tensor], teacher: torch.Tensor | None = None) -> LossInputs:
    lp = t["lp"].clone().reshape(-1).requires_grad_(True)
    q = t["teacher"] if teacher is None else teacher
    return LossInputs(trainer_logprobs=lp, inference_logprobs=t["inf"].reshape(-1), advantages=t["adv"].reshape(-1),
                      loss_mask=t["mask"].reshape(-1), teacher_logprobs=q.reshape(-1))  # fmt: skip


@pytest.mark.parametrize("cfg", [
    OPDLossConfig(),
    OPDLossConfig(kl_tau=0.0, trust_region_delta=0.05),
    DPPOKLLossConfig(teacher_kl_coef=0.7, adv_tau=0.5, kl_tau=0.01),
    DPPOKLLossConfig(teacher_kl_coef=2.0),
], ids=["opd", "opd-tight-trust-region", "rl+teacher", "rl+teacher-2"])  # fmt: skip
def test_loss_and_gradient_match_float64_loop(cfg):
    t = _tensors(seed=1)
    inp = _inputs(t)
    out = dppo_kl_loss(inp, cfg)
    out.loss.backward()
    want_loss, want_grad, want_kl = _reference(t, cfg)
    assert out.loss.item() == pytest.approx(want_loss, rel=1e-12, abs=1e-12)
    got = inp.trainer_logprobs.grad.reshape(-1).tolist()
    assert got == pytest.approx([g for row in want_grad for g in row], rel=1e-12, abs=1e-12)
    num, den = out.metrics["teacher_kl"]
    assert (num / den).item() == pytest.approx(want_kl, rel=1e-12)
    assert den.item() == int(t["mask"].sum())


def test_opd_is_the_teacher_term_alone():
    """`type = "opd"`: the RL advantage does not enter (same loss with the advantages replaced by zeros), and with
    inference = trainer and no KL term the gradient at a kept token is exactly -(log q - log p)."""
    t = _tensors(seed=2)
    t["inf"] = t["lp"].clone()
    cfg = OPDLossConfig(kl_tau=0.0)
    a = dppo_kl_loss(_inputs(t), cfg)
    t0 = {**t, "adv": torch.zeros_like(t["adv"])}
    inp = _inputs(t0)
    b = dppo_kl_loss(inp, cfg)
    b.loss.backward()
    assert a.loss.item() == pytest.approx(b.loss.item(), rel=1e-14)
    want = torch.where(t["mask"], -(t["teacher"] - t["lp"]), torch.zeros(()))
    assert torch.allclose(inp.trainer_logprobs.grad.reshape(B, S), want, rtol=0, atol=1e-14)


def test_masked_positions_are_ignored_even_when_not_finite():
    t = _tensors(seed=3)
    q = t["teacher"].clone()
    q[~t["mask"]] = float("nan")  # prompt tokens: vLLM has no logprob for the first one
    inp = _inputs(t, teacher=q)
    out = dppo_kl_loss(inp, OPDLossConfig())
    out.loss.backward()
    assert math.isfinite(out.loss.item()) and torch.isfinite(inp.trainer_logprobs.grad).all()
    assert out.loss.item() == pytest.approx(_reference(t, OPDLossConfig())[0], rel=1e-12)
    assert (inp.trainer_logprobs.grad.reshape(B, S)[~t["mask"]] == 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("-inf")])
def test_non_finite_teacher_logprob_on_a_loss_token_is_refused(bad):
    t = _tensors()
    q = t["teacher"].clone()
    q[0, 3] = bad
    with pytest.raises(ValueError, match="teacher logprob is NaN or inf on a loss token"):
        dppo_kl_loss(_inputs(t, teacher=q), OPDLossConfig())


def test_missing_teacher_logprobs_refused_unless_no_loss_token():
    t = _tensors()
    inp = _inputs(t)
    inp.teacher_logprobs = None
    with pytest.raises(ValueError, match=r"\[orchestrator.teacher\]"):
        dppo_kl_loss(inp, OPDLossConfig())
    inp.loss_mask = torch.zeros_like(inp.loss_mask)  # a padding micro-batch of the trainer
    assert dppo_kl_loss(inp, OPDLossConfig()).loss.item() == 0.0
    assert "teacher_kl" not in dppo_kl_loss(inp, DPPOKLLossConfig()).metrics  # off by default


def test_config_selects_opd():
    cfg = TrainerConfig.model_validate({"loss": {"type": "opd"}})
    assert isinstance(cfg.loss, OPDLossConfig)
    assert (cfg.loss.adv_tau, cfg.loss.teacher_kl_coef) == (0.0, 1.0)
    loss = get_loss(cfg.loss)
    assert "teacher_kl" in loss.console
    with pytest.raises(ValueError):
        TrainerConfig.model_validate({"loss": {"type": "opd", "teacher_kl_coef": 0}})


def _mb(n: int, teacher: np.ndarray | None, loss: bool = True) -> MicroBatch:
    mask = np.zeros(n, bool)
    mask[1:] = loss
    return MicroBatch(np.arange(n), np.arange(n), mask, np.ones(n), np.full(n, -0.5), np.ones(n), teacher)


def test_batch_format_carries_teacher_logprobs():
    mbs = [_mb(4, np.array([0.0, -1.0, -2.0, -0.25])), MicroBatch.empty_like(2, teacher=True)]
    out = decode_batch(encode_batch(StepBatch(1, 0, 1, 3, mbs)))
    assert out.micro_batches[0].teacher_logprobs.tolist() == [0.0, -1.0, -2.0, -0.25]
    assert out.micro_batches[0].teacher_logprobs.dtype == np.float32
    plain = decode_batch(encode_batch(StepBatch(1, 0, 1, 3, [_mb(4, None)])))
    assert plain.micro_batches[0].teacher_logprobs is None
    bad = _mb(4, np.array([0.0, -1.0, float("nan"), -0.25]))
    with pytest.raises(BatchFormatError, match="teacher_logprobs is NaN or inf"):
        decode_batch(encode_batch(StepBatch(1, 0, 1, 3, [bad])))
    # concatenation: a loss-free micro-batch without the field gets zeros; one with loss tokens is refused
    cat = concat_micro_batches([mbs[0], MicroBatch.empty_like(2)], 16)
    assert cat[0].teacher_logprobs.tolist() == [0.0, -1.0, -2.0, -0.25, 0.0, 0.0]
    with pytest.raises(BatchFormatError, match="teacher_logprobs"):
        concat_micro_batches([mbs[0], _mb(3, None)], 16)


def test_shared_prefix_regroup_keeps_teacher_logprobs():
    """Two samples sharing a 2-token prompt, packed in one micro-batch: the regrouped shared-prefix micro-batch
    holds each suffix token's teacher logprob at the same place as its other fields."""
    from prime_rl.trainer.shared_prefix import SharedPrefixMicroBatch, regroup

    ids = np.array([5, 6, 7, 8, 5, 6, 9])
    pos = np.array([0, 1, 2, 3, 0, 1, 2])
    mask = np.array([0, 0, 1, 1, 0, 0, 1], bool)
    teacher = np.array([0.0, -0.1, -0.2, -0.3, 0.0, -0.1, -0.9])
    mb = MicroBatch(ids, pos, mask, np.ones(7), np.full(7, -0.5), np.ones(7), teacher)
    (spm,) = regroup([mb], micro_batch_size=4)
    assert isinstance(spm, SharedPrefixMicroBatch) and spm.prefix_ids.tolist() == [5, 6]
    assert spm.suffix_ids.tolist() == [[7, 8], [9, 0]]
    assert spm.teacher_logprobs.reshape(-1).tolist() == pytest.approx([-0.2, -0.3, -0.9, 0.0])
