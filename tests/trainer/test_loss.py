"""Loss values and gradients on a hand-worked 2-sample x 5-token example."""

from __future__ import annotations

import math

import pytest
import torch

from prime_rl.config.trainer import LossConfig
from prime_rl.trainer.loss import LossInputs, get_loss_fn, grpo_loss, sft_loss

TAU = 0.1
# (p_trainer, p_inference, advantage, loss_mask) per token; sample A = tokens 0-4, sample B = tokens 5-9
TOKENS = [
    (0.3, 0.3, 0.0, False),  # A0 prompt
    (0.5, 0.5, 1.0, True),  # A1 ratio 1, kept: loss -1, grad -1
    (0.8, 0.5, 1.0, True),  # A2 prob up by 0.3 > 0.2 with A > 0: masked; only kl: tau ln(1.6)^2
    (0.25, 0.5, 1.0, True),  # A3 prob down by 0.25 but A > 0 pushes up: kept, ratio 0.5
    (0.9, 0.1, 1.0, False),  # A4 not a loss token: nothing
    (0.3, 0.3, 0.0, False),  # B0 prompt
    (0.2, 0.5, -1.0, True),  # B1 prob down by 0.3 with A < 0: masked; only kl: tau ln(0.4)^2
    (0.6, 0.5, -1.0, True),  # B2 prob up 0.1 with A < 0: kept, ratio 1.2: loss +1.2
    (0.3, 0.5, 0.0, True),  # B3 zero advantage: no pg term, kl tau ln(0.6)^2
    (0.4, 0.4, -1.0, True),  # B4 ratio 1, kept: loss +1, grad +1
]


def _inputs():
    lp = torch.tensor([math.log(t[0]) for t in TOKENS], dtype=torch.float64, requires_grad=True)
    return LossInputs(
        trainer_logprobs=lp,
        inference_logprobs=torch.tensor([math.log(t[1]) for t in TOKENS], dtype=torch.float64),
        advantages=torch.tensor([t[2] for t in TOKENS], dtype=torch.float64),
        loss_mask=torch.tensor([t[3] for t in TOKENS]),
    )


def test_grpo_loss_and_gradient_hand_worked():
    inp = _inputs()
    out = grpo_loss(inp, LossConfig(kl_tau=TAU, trust_region_delta=0.2))
    out.loss.backward()
    # hand-worked: pg terms -1 (A1), -0.5 (A3), +1.2 (B2), +1 (B4); kl terms tau * ln(ratio)^2 on all 7 loss tokens
    ln = math.log
    expected = -1 - 0.5 + 1.2 + 1 + TAU * (ln(1.6) ** 2 + ln(0.5) ** 2 + ln(0.4) ** 2 + ln(1.2) ** 2 + ln(0.6) ** 2)
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.883512906, abs=1e-8)  # written out by hand
    grad = inp.trainer_logprobs.grad.tolist()
    expected_grad = [
        0.0,
        -1.0,
        2 * TAU * ln(1.6),
        -0.5 + 2 * TAU * ln(0.5),
        0.0,
        0.0,
        2 * TAU * ln(0.4),
        1.2 + 2 * TAU * ln(1.2),
        2 * TAU * ln(0.6),
        1.0,
    ]
    assert grad == pytest.approx(expected_grad, abs=1e-12)
    m = {k: (n / d).item() for k, (n, d) in out.metrics.items()}
    assert m["masked_frac"] == pytest.approx(2 / 7)
    assert m["masked_frac_pos"] == pytest.approx(1 / 3)  # A2 of A1..A3
    assert m["masked_frac_neg"] == pytest.approx(1 / 3)  # B1 of B1, B2, B4
    k3 = sum(r - ln(r) - 1 for r in (1.0, 1.6, 0.5, 0.4, 1.2, 0.6, 1.0)) / 7
    assert m["mismatch_kl"] == pytest.approx(k3, abs=1e-12)


def test_trust_region_off_on_each_side_only_in_advantage_direction():
    """Same probability moves with the opposite advantage sign are not masked."""
    inp = _inputs()
    inp.advantages = -inp.advantages
    out = grpo_loss(inp, LossConfig(kl_tau=0.0, trust_region_delta=0.2))
    m = {k: (n / d).item() for k, (n, d) in out.metrics.items()}
    # now A2 (up 0.3, A<0) and B1 (down 0.3, A>0) are kept; A3 (down 0.25, A<0) is masked
    assert m["masked_frac"] == pytest.approx(1 / 7)
    # pg: A1 +1, A2 +1.6, A3 masked, B1 -0.4, B2 -1.2, B3 0, B4 -1
    assert out.loss.item() == pytest.approx(1 + 1.6 - 0.4 - 1.2 - 1, abs=1e-12)


def test_tis_cap_caps_value_and_gradient_weight():
    inp = _inputs()
    out = grpo_loss(inp, LossConfig(kl_tau=0.0, tis_cap=0.8))
    out.loss.backward()
    # B2's ratio 1.2 is capped to 0.8; ratio-1 tokens (A1, B4) to 0.8 too; A3 (0.5) unchanged
    assert out.loss.item() == pytest.approx(-0.8 - 0.5 + 0.8 + 0.8, abs=1e-12)
    g = inp.trainer_logprobs.grad
    assert g[7].item() == pytest.approx(0.8) and g[1].item() == pytest.approx(-0.8) and g[3].item() == pytest.approx(-0.5)
    capped = out.metrics["tis_capped_frac"]
    assert (capped[0] / capped[1]).item() == pytest.approx(4 / 7)  # A1, A2, B2, B4 have ratio > 0.8


def test_log_ratio_clamp_before_exp():
    lp = torch.tensor([0.0, math.log(0.5)], dtype=torch.float64, requires_grad=True)
    inp = LossInputs(lp, torch.tensor([0.0, math.log(0.5) - 30.0], dtype=torch.float64),
                     torch.tensor([0.0, -1.0], dtype=torch.float64), torch.tensor([False, True]))
    out = grpo_loss(inp, LossConfig(kl_tau=0.0, log_ratio_clamp=2.0, trust_region_delta=0.9))
    assert out.loss.item() == pytest.approx(math.exp(2.0))  # -A * exp(clamp(30)) = e^2, finite
    out.loss.backward()
    assert inp.trainer_logprobs.grad[1].item() == 0.0  # saturated clamp passes no gradient


def test_sft_loss_is_nll_of_loss_tokens():
    inp = _inputs()
    out = sft_loss(inp)
    expected = -sum(math.log(t[0]) for t in TOKENS if t[3])
    assert out.loss.item() == pytest.approx(expected)


def test_registry_and_import_path():
    assert get_loss_fn("grpo") is grpo_loss
    assert get_loss_fn("prime_rl.trainer.loss:sft_loss") is sft_loss
    with pytest.raises(ValueError, match="loss.type = 'nope'"):
        get_loss_fn("nope")
    with pytest.raises(ValueError, match="cannot import"):
        get_loss_fn("prime_rl.trainer.loss:missing")
