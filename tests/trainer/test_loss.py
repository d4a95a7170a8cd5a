"""Loss values and gradients on a hand-worked 2-sample x 5-token example; the loss registry and its configs."""

from __future__ import annotations

import math

import pytest
import torch

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.trainer import CustomLossConfig, DPPOKLLossConfig, TrainerConfig
from prime_rl.trainer.loss import LOSSES, LossInputs, dppo_kl_loss, get_loss, sft_loss

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


def test_dppo_kl_loss_and_gradient_hand_worked():
    inp = _inputs()
    out = dppo_kl_loss(inp, DPPOKLLossConfig(kl_tau=TAU, trust_region_delta=0.2))
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
    out = dppo_kl_loss(inp, DPPOKLLossConfig(kl_tau=0.0, trust_region_delta=0.2))
    m = {k: (n / d).item() for k, (n, d) in out.metrics.items()}
    # now A2 (up 0.3, A<0) and B1 (down 0.3, A>0) are kept; A3 (down 0.25, A<0) is masked
    assert m["masked_frac"] == pytest.approx(1 / 7)
    # pg: A1 +1, A2 +1.6, A3 masked, B1 -0.4, B2 -1.2, B3 0, B4 -1
    assert out.loss.item() == pytest.approx(1 + 1.6 - 0.4 - 1.2 - 1, abs=1e-12)


def test_tis_cap_caps_value_and_gradient_weight():
    inp = _inputs()
    out = dppo_kl_loss(inp, DPPOKLLossConfig(kl_tau=0.0, tis_cap=0.8))
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
    out = dppo_kl_loss(inp, DPPOKLLossConfig(kl_tau=0.0, log_ratio_clamp=2.0, trust_region_delta=0.9))
    assert out.loss.item() == pytest.approx(math.exp(2.0))  # -A * exp(clamp(30)) = e^2, finite
    out.loss.backward()
    assert inp.trainer_logprobs.grad[1].item() == 0.0  # saturated clamp passes no gradient


def test_sft_loss_is_nll_of_loss_tokens():
    inp = _inputs()
    out = sft_loss(inp)
    expected = -sum(math.log(t[0]) for t in TOKENS if t[3])
    assert out.loss.item() == pytest.approx(expected)


def test_terms_add_up_to_the_loss():
    out = dppo_kl_loss(_inputs(), DPPOKLLossConfig(kl_tau=TAU, trust_region_delta=0.2))
    assert set(out.terms) == {"pg", "kl"}
    assert (out.terms["pg"] + out.terms["kl"]).item() == pytest.approx(out.loss.item(), abs=1e-12)
    ln = math.log
    assert out.terms["pg"].item() == pytest.approx(-1 - 0.5 + 1.2 + 1, abs=1e-12)
    assert out.terms["kl"].item() == pytest.approx(
        TAU * (ln(1.6) ** 2 + ln(0.5) ** 2 + ln(0.4) ** 2 + ln(1.2) ** 2 + ln(0.6) ** 2), abs=1e-12
    )


def test_registry_console_metrics_and_custom_import_path():
    loss = get_loss(DPPOKLLossConfig())
    assert loss.fn is dppo_kl_loss and "dppo_kl" in LOSSES and "grpo" not in LOSSES
    assert loss.console == ("mismatch_kl", "masked_frac_pos", "masked_frac_neg")
    custom = get_loss(CustomLossConfig(import_path="prime_rl.trainer.loss:sft_loss"))
    assert custom.fn is sft_loss and custom.console == ()
    with pytest.raises(ValueError, match="cannot import"):
        get_loss(CustomLossConfig(import_path="prime_rl.trainer.loss:missing"))


def test_loss_type_chooses_the_config_class(caplog):
    cfg = parse_config(TrainerConfig, ["--loss.kl-tau", "0.5"])
    assert isinstance(cfg.loss, DPPOKLLossConfig) and cfg.loss.kl_tau == 0.5
    cfg = parse_config(TrainerConfig, ["--loss.type", "custom", "--loss.import-path", "pkg.mod:fn"])
    assert isinstance(cfg.loss, CustomLossConfig) and cfg.loss.import_path == "pkg.mod:fn"
    # a knob of another variant is an error naming it, not silently ignored
    with pytest.raises(ConfigError, match="kl_tau"):
        parse_config(TrainerConfig, ["--loss.type", "custom", "--loss.import-path", "a:b", "--loss.kl-tau", "0"])
    with pytest.raises(ConfigError, match="'dppo_kl', 'opd', 'custom'"):
        parse_config(TrainerConfig, ["--loss.type", "nope"])
    # old spellings: `grpo` (deprecated alias, with a warning) and a bare import path
    with caplog.at_level("WARNING"):
        cfg = parse_config(TrainerConfig, ["--loss.type", "grpo", "--loss.kl-tau", "0"])
    assert isinstance(cfg.loss, DPPOKLLossConfig) and cfg.loss.kl_tau == 0.0
    assert "deprecated" in caplog.text and "dppo_kl" in caplog.text
    assert parse_config(TrainerConfig, ["--loss.type", "pkg.mod:fn"]).loss == CustomLossConfig(import_path="pkg.mod:fn")


def test_help_lists_each_loss_variant_with_its_own_fields(capsys):
    with pytest.raises(SystemExit):
        parse_config(TrainerConfig, ["--help-all"])
    out = capsys.readouterr().out
    dppo = out[out.index("variant: DPPOKLLossConfig"):]
    custom = out[out.index("variant: CustomLossConfig"):]
    assert "--loss.kl-tau" in dppo.split("variant:")[1] and "--loss.import-path" not in dppo.split("variant:")[1]
    assert "--loss.import-path" in custom.split("variant:")[1] and "--loss.kl-tau" not in custom.split("variant:")[1]
