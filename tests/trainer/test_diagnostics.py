"""`[trainer.diagnostics]`: kl_to_start and entropy/decision against an independent float64 computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.trainer.helpers import make_samples, trainer_config, write_stream

from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import rl
from prime_rl.trainer.diagnostics import decision_token_ids

CHARS = "0123456789abcdef"


def _lp_ent(model, s):
    x = torch.tensor([s["input_ids"].tolist()])
    with torch.no_grad():
        logits = model(x).logits[0, :-1] / float(s["temperature"][0])
    lp_all = torch.log_softmax(logits, -1)
    lp = lp_all.gather(-1, x[0, 1:, None])[:, 0]
    ent = -(lp_all.exp() * lp_all).sum(-1)
    return lp, ent  # position t predicts token t+1


def _k3(start, model, samples) -> float:
    k3, n = 0.0, 0
    for s in samples:
        lp, _ = _lp_ent(model, s)
        lp0, _ = _lp_ent(start, s)
        for t in np.nonzero(s["loss_mask"])[0]:
            d = float(lp0[t - 1] - lp[t - 1])
            k3 += np.exp(d) - d - 1
            n += 1
    return k3 / n


def test_kl_to_start_and_decision_entropy(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    samples = make_samples(tiny_model_dir, n=6, seed=4, temperature=0.8)
    run = tmp_path / "run"
    write_stream(run, {1: samples, 2: samples})
    cfg = trainer_config(tiny_model_dir, run, max_steps=2, weights={"keep_last": None},
                         diagnostics={"kl_to_start": True, "decision_chars": CHARS})  # fmt: skip
    rl.run(cfg)
    rows = read_metrics(run, "trainer")
    ids = set(decision_token_ids(tiny_model_dir, CHARS))
    assert len(ids) == len(CHARS)
    start = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float64).eval()
    after1 = AutoModelForCausalLM.from_pretrained(str(run / "weights" / "step_1"), dtype=torch.float64).eval()
    for row, model in ((rows[0], start), (rows[1], after1)):
        ent, n_dec = 0.0, 0
        for s in samples:
            _, e = _lp_ent(model, s)
            for t in np.nonzero(s["loss_mask"])[0]:
                if int(s["input_ids"][t]) in ids:
                    ent += float(e[t - 1])
                    n_dec += 1
        assert n_dec > 0
        assert row["kl_to_start"] == pytest.approx(_k3(start, model, samples), rel=1e-3, abs=1e-9)
        assert row["entropy/decision"] == pytest.approx(ent / n_dec, rel=1e-4)
    assert rows[0]["kl_to_start"] < 1e-9 < 1e-4 < rows[1]["kl_to_start"]  # step 1 trains the starting policy itself


def test_kl_to_start_interval_logs_it_on_step_1_and_every_nth_step(tiny_model_dir, tmp_path):
    """kl_to_start_interval = 2 over 3 steps: kl_to_start on steps 1 and 2 (the value an every-step run gives,
    checked independently at step 2), not on step 3, whose reference forward is skipped; entropy/decision stays on
    every step."""
    from transformers import AutoModelForCausalLM

    samples = make_samples(tiny_model_dir, n=6, seed=4, temperature=0.8)
    run = tmp_path / "run"
    write_stream(run, {1: samples, 2: samples, 3: samples})
    cfg = trainer_config(tiny_model_dir, run, max_steps=3, weights={"keep_last": None},
                         diagnostics={"kl_to_start": True, "kl_to_start_interval": 2, "decision_chars": CHARS})  # fmt: skip
    rl.run(cfg)
    rows = read_metrics(run, "trainer")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert ["kl_to_start" in r for r in rows] == [True, True, False]
    assert all("entropy/decision" in r for r in rows)
    start = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float64).eval()
    after1 = AutoModelForCausalLM.from_pretrained(str(run / "weights" / "step_1"), dtype=torch.float64).eval()
    assert rows[1]["kl_to_start"] == pytest.approx(_k3(start, after1, samples), rel=1e-3, abs=1e-9)


def test_kl_to_start_interval_without_kl_to_start_is_refused(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="kl_to_start_interval = 5 .* kl_to_start is false"):
        trainer_config(tiny_model_dir, tmp_path / "run", diagnostics={"kl_to_start_interval": 5})
