"""The reference-KL term (`[trainer.loss] ref_kl_coef`): hand-worked values and gradients of the loss, and the real
trainer's gradient on a step whose advantages are all 0 against an independent float64 computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tests.trainer.helpers import make_samples, trainer_config, write_stream
from tests.trainer.textbook import install_probe, sample_logprobs

from prime_rl.config.trainer import DPPOKLLossConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import rl
from prime_rl.trainer.loss import LossInputs, dppo_kl_loss

BETA = 0.5
# (p_trainer, p_reference, loss_mask); advantages 0 and inference = trainer, so only the reference-KL term is left
TOKENS = [(0.5, 0.5, True), (0.25, 0.5, True), (0.8, 0.4, True), (0.3, 0.9, False)]


def _inputs(with_ref: bool = True) -> LossInputs:
    lp = torch.tensor([math.log(p) for p, _, _ in TOKENS], dtype=torch.float64, requires_grad=True)
    return LossInputs(
        trainer_logprobs=lp,
        inference_logprobs=lp.detach().clone(),
        advantages=torch.zeros(len(TOKENS), dtype=torch.float64),
        loss_mask=torch.tensor([m for _, _, m in TOKENS]),
        ref_logprobs=torch.tensor([math.log(q) for _, q, _ in TOKENS], dtype=torch.float64) if with_ref else None,
    )


def test_ref_kl_term_hand_worked():
    inp = _inputs()
    out = dppo_kl_loss(inp, DPPOKLLossConfig(kl_tau=0.0, ref_kl_coef=BETA))
    out.loss.backward()
    # k3 = q/p - ln(q/p) - 1 per loss token: 0; 2 - ln 2 - 1; 0.5 + ln 2 - 1; the 4th is not a loss token
    ln2 = math.log(2)
    k3 = [0.0, 1 - ln2, ln2 - 0.5, 0.0]
    assert out.loss.item() == pytest.approx(BETA * sum(k3), abs=1e-12)
    assert BETA * sum(k3) == pytest.approx(0.25, abs=1e-12)  # 0.5 * (1 - ln 2 + ln 2 - 0.5), by hand
    # d/dlogp of beta * (q/p - ln(q/p) - 1) = beta * (1 - q/p): 0, 0.5 * (1 - 2), 0.5 * (1 - 0.5), masked 0
    assert inp.trainer_logprobs.grad.tolist() == pytest.approx([0.0, -0.5, 0.25, 0.0], abs=1e-12)
    m = {k: (n / d).item() for k, (n, d) in out.metrics.items()}
    assert m["ref_kl"] == pytest.approx(sum(k3) / 3, abs=1e-12)
    assert out.terms["ref_kl"].item() == pytest.approx(BETA * sum(k3), abs=1e-12)


def test_ref_kl_off_by_default_and_refuses_missing_reference():
    out = dppo_kl_loss(_inputs(with_ref=False), DPPOKLLossConfig())
    assert "ref_kl" not in out.metrics and "ref_kl" not in out.terms
    with pytest.raises(ValueError, match="ref_kl_coef"):
        dppo_kl_loss(_inputs(with_ref=False), DPPOKLLossConfig(ref_kl_coef=0.1))


def test_trainer_trains_the_ref_kl_term_on_a_zero_advantage_step(tiny_model_dir, tmp_path):
    """Step 1 moves the policy away from the start (advantages +-1); step 2 has the same samples with every
    advantage 0: without the term the trainer skips it (no learning signal), with it the gradient the trainer
    applies must be beta * d/dtheta mean_t k3(log pi_ref - log pi) from an independent float64 loop over the
    unpacked samples, the policy being weights/step_1 and the reference the starting model."""
    from transformers import AutoModelForCausalLM

    samples = make_samples(tiny_model_dir, n=6, seed=2, temperature=0.9)
    zero = [{**s, "advantages": np.zeros_like(s["advantages"])} for s in samples]
    run = tmp_path / "run"
    write_stream(run, {1: samples, 2: zero})
    cfg = trainer_config(tiny_model_dir, run, max_steps=2, weights={"keep_last": None}, optim={"max_norm": None},
                         loss={"kl_tau": 0.0, "ref_kl_coef": BETA})  # fmt: skip
    handle = install_probe(tmp_path / "grads.pt")
    try:
        rl.run(cfg)
    finally:
        handle.remove()
    rows = read_metrics(run, "trainer")
    assert rows[1]["skipped_update"] == 0.0 and "no_signal" not in rows[1]

    def load(path):
        return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64, attn_implementation="eager").eval()

    policy, start = load(run / "weights" / "step_1"), load(tiny_model_dir)
    n = int(sum(s["loss_mask"].sum() for s in zero))
    total = torch.zeros((), dtype=torch.float64)
    k3_sum = 0.0
    for s in zero:
        ids, T = s["input_ids"].tolist(), float(s["temperature"][0])
        lp = sample_logprobs(policy, ids, T)
        with torch.no_grad():
            ref = sample_logprobs(start, ids, T)
        for t in np.nonzero(s["loss_mask"])[0]:
            d = ref[t] - lp[t]
            total = total + BETA * (torch.exp(d) - d - 1) / n
            k3_sum += float((torch.exp(d) - d - 1).detach())
    total.backward()
    expect = [p.grad.detach() for p in policy.parameters()]
    got = torch.load(tmp_path / "grads.pt")
    assert len(got) == len(expect)
    for g, e in zip(got, expect, strict=True):
        assert float(e.norm()) > 0
        assert float((g - e).norm()) / float(e.norm()) <= 2e-4
    assert rows[1]["ref_kl"] == pytest.approx(k3_sum / n, rel=1e-3)
    assert rows[1]["ref_kl"] > 1e-4  # step 1 moved the policy: the check above is not of a zero gradient
    assert rows[0]["ref_kl"] == pytest.approx(0.0, abs=1e-9)  # step 1 trains the starting policy itself

