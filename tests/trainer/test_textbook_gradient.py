"""The gradient the RL trainer applies is the textbook policy gradient (issue 16 §1).

A step's rollouts (two sampled turns with untrained tool tokens between them, a rollout with two samples, a masked
rollout, groups at temperatures 0.7 and 1.3) get their advantages from the orchestrator's `compute_advantages`
(checked against `textbook.grpo_reference`), are packed by the orchestrator's `pack_step` into several micro-batches
per rank and written as `rollouts/step_1/rank_R.bin`; the real trainer (`rl.run`: batch files, optional shared-prefix
regrouping, the engine's forward/backward with temperature scaling, FSDP2) trains step 1, and a probe reads the
gradient just before AdamW steps. That gradient must equal `textbook.reference_gradient`: an independent float64
loop over unpacked samples. On-policy (inference logprobs = the model's) and off-policy (a perturbed behaviour
model: importance ratio, trust-region mask, KL term), 1 process here and 2 under torchrun (slow).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.trainer.helpers import trainer_config
from tests.trainer.textbook import (
    compare,
    fill_logprobs,
    grpo_reference,
    install_probe,
    make_rollouts,
    perturbed,
    reference_gradient,
)

from prime_rl.config.loader import write_config
from prime_rl.config.orchestrator import GRPOAdvantageConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.orchestrator.advantages import compute_advantages
from prime_rl.orchestrator.outputs import write_step
from prime_rl.orchestrator.packing import pack_items, pack_step
from prime_rl.trainer import rl

GROUPS = [
    {"size": 4, "temperature": 0.7, "rewards": [0.1, 0.9, 0.4, 0.4]},
    {"size": 4, "temperature": 1.3, "rewards": [1.0, 0.0, 0.3, 0.8], "masked": [3]},
    {"size": 4, "temperature": 0.7, "rewards": [0.5, 0.2, 0.9, 0.0]},
]
SEQ_LEN = 48  # several micro-batches per rank


@pytest.fixture(scope="module")
def models(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    m64 = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float64, attn_implementation="eager")
    m64.eval()
    return m64, perturbed(m64, 0.3, seed=1)


def _rollouts(model64, behaviour, std_normalize=False):
    rollouts = make_rollouts(np.random.default_rng(0), GROUPS)
    fill_logprobs(rollouts, behaviour if behaviour is not None else model64)
    cfg = GRPOAdvantageConfig(std_normalize=std_normalize)
    for gid in range(len(GROUPS)):
        g = [r for r in rollouts if r.group_id == gid]
        adv = compute_advantages([r.reward for r in g], [not r.masked for r in g], cfg)
        for r, a in zip(g, adv, strict=True):
            r.advantage = a
    return rollouts


def _write_step(run: Path, rollouts, num_ranks: int, aggregation: str = "token-mean") -> int:
    batches = pack_step(pack_items(rollouts, aggregation), step=1, seq_len=SEQ_LEN, num_ranks=num_ranks)
    write_step(batches, run / "rollouts" / "step_1")
    assert all(len(b.micro_batches) >= 2 for b in batches)
    return batches[0].total_loss_tokens


def _config(model_dir, run, loss, shared_prefix):
    return trainer_config(
        model_dir, run, max_steps=1, seq_len=SEQ_LEN, optim={"lr": 1e-3, "max_norm": None}, loss=loss,
        shared_prefix=shared_prefix, micro_batch_size=4,
    )


@pytest.mark.parametrize("std_normalize", [False, True])
def test_grpo_advantages_equal_an_independent_computation(std_normalize):
    rng = np.random.default_rng(5)
    cfg = GRPOAdvantageConfig(std_normalize=std_normalize)
    for size in (2, 3, 8):
        for _ in range(20):
            rewards = rng.random(size).round(2).tolist()
            mask = (rng.random(size) > 0.2).tolist()
            got = compute_advantages(rewards, mask, cfg)
            assert got == pytest.approx(grpo_reference(rewards, mask, std_normalize), abs=1e-9)
    # hand-worked: rewards 1, 0, 0.5, masked 3rd -> mean 0.5 -> +0.5, -0.5, 0; std 0.5 -> +1, -1, 0
    expect = [1.0, -1.0, 0.0] if std_normalize else [0.5, -0.5, 0.0]
    assert compute_advantages([1.0, 0.0, 0.5], [True, True, False], cfg) == pytest.approx(expect, abs=1e-5)


CASES = {
    # on-policy: ratio 1, the KL term's gradient 2 tau (log pi - log mu) is 0 and nothing is masked, so the default
    # loss's gradient is the plain policy gradient
    "on-policy": (False, {}, dict()),
    # off-policy, no KL, no trust region: the importance-weighted policy gradient
    "off-policy": (True, {"kl_tau": 0.0, "trust_region_delta": 1e9}, dict()),
    # off-policy with the trust-region mask (small delta: the tiny model's probabilities are ~1/265) and a KL term
    "off-policy-masked-kl": (True, {"kl_tau": 0.05, "trust_region_delta": 1.5e-4}, dict(kl_tau=0.05, trust_region_delta=1.5e-4)),
    # orchestrator.loss_aggregation = seq-mean-token-mean (GRPO as published): each rollout's token mean, averaged
    # over rollouts, folded into the advantages by the orchestrator's packing; the KL term stays per token
    "off-policy-seq-mean": (True, {"kl_tau": 0.05, "trust_region_delta": 1e9},
                            dict(kl_tau=0.05, aggregation="seq-mean-token-mean")),
}


@pytest.mark.parametrize("shared_prefix", [False, True], ids=["packed", "shared-prefix"])
@pytest.mark.parametrize("case", list(CASES))
def test_trainer_gradient_is_the_textbook_policy_gradient(tiny_model_dir, models, tmp_path, case, shared_prefix):
    off_policy, loss, ref_kw = CASES[case]
    model64, stale = models
    rollouts = _rollouts(model64, stale if off_policy else None)
    run = tmp_path / "run"
    n = _write_step(run, rollouts, num_ranks=1, aggregation=ref_kw.get("aggregation", "token-mean"))
    assert n == sum(sum(s.loss_mask) for r in rollouts if not r.masked for s in r.samples)
    handle = install_probe(tmp_path / "grads.pt")
    try:
        rl.run(_config(tiny_model_dir, run, loss, shared_prefix))
    finally:
        handle.remove()
    ref = reference_gradient(model64, rollouts, **ref_kw)
    compare(torch.load(tmp_path / "grads.pt"), ref)
    m = read_metrics(run, "trainer")[0]
    assert m["loss_tokens"] == n
    if case == "off-policy-masked-kl":
        assert 0.05 < m["masked_frac"] < 0.95  # the mask is exercised, on both signs of advantage
        assert m["masked_frac_pos"] > 0 and m["masked_frac_neg"] > 0
    if off_policy:
        assert m["mismatch_kl"] > 1e-3
    else:  # on-policy: d loss / d logp_t = -A_t / N for the policy-gradient term, 0 for the KL term
        adv_sq = sum(r.advantage**2 * sum(s.loss_mask) for r in rollouts if not r.masked for s in r.samples)
        assert m["logp_grad_norm/pg"] == pytest.approx(adv_sq**0.5 / n, rel=1e-5)
        assert m["logp_grad_norm/kl"] == pytest.approx(0.0, abs=1e-9)


TORCHRUN = Path(sys.executable).with_name("torchrun")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("shared_prefix", [False, True], ids=["packed", "shared-prefix"])
def test_two_process_gradient_is_the_textbook_policy_gradient(tiny_model_dir, models, tmp_path, shared_prefix):
    """2 torchrun processes (gloo, FSDP2), the step cut over ranks by the orchestrator's packing, off-policy with
    mask and KL term: the summed gradient still equals the reference."""
    model64, stale = models
    rollouts = _rollouts(model64, stale, std_normalize=True)
    run = tmp_path / "run"
    _write_step(run, rollouts, num_ranks=2)
    loss = {"kl_tau": 0.05, "trust_region_delta": 1.5e-4}
    cfg_path = write_config(_config(tiny_model_dir, run, loss, shared_prefix), run / "configs" / "trainer.toml")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    out = tmp_path / "grads.pt"
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node=2", str(REPO / "tests/trainer/grad_probe.py"), str(out),
           "@", str(cfg_path)]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    compare(torch.load(out), reference_gradient(model64, rollouts, kl_tau=0.05, trust_region_delta=1.5e-4))
