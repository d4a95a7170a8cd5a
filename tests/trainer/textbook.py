"""The textbook policy gradient, computed independently of prime-rl's trainer, and a probe that reads the gradient the
real trainer (`prime_rl.trainer.rl.run`, optionally under torchrun) applies.

Reference (`reference_gradient`): a plain float64 copy of the model, one unpacked forward per sample,
`log_softmax(logits[t-1] / T)[token t]`, and the surrogate whose gradient is the importance-weighted policy gradient

    g = (1 / N) * sum over loss tokens t of  A_t * r_t * grad log pi(a_t)        r_t = stopgrad(pi(a_t) / mu(a_t))

(Williams 1992 for r = 1; per-token importance weights as in PPO, Schulman et al. 2017, without clipping), N = the
step's loss-token count, mu = the inference (behaviour) policy. Optionally with the trust-region mask and the
tau * (log pi - log mu)^2 term of the default loss, written out here from their definitions in docs/trainer.md.

Advantages (`grpo_reference`): per group, mean over the unmasked members subtracted (Dr. GRPO), optionally divided by
the population std + 1e-6; masked members 0; fewer than two unmasked members: all 0.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from prime_rl.envs.base import Task
from prime_rl.orchestrator.types import Rollout, Sample

PROBE_FILE = "grads.pt"


def grpo_reference(rewards: list[float], mask: list[bool], std_normalize: bool = False) -> list[float]:
    """GRPO advantages of one group from their definition, in numpy."""
    r, m = np.asarray(rewards, np.float64), np.asarray(mask, bool)
    if m.sum() < 2:
        return [0.0] * len(r)
    a = r - r[m].mean()
    if std_normalize:
        a = a / (r[m].std() + 1e-6)
    return np.where(m, a, 0.0).tolist()


def make_rollouts(rng: np.random.Generator, groups: list[dict]) -> list[Rollout]:
    """Rollouts of token-id samples with the shapes the agent loop produces.

    Each entry of `groups`: `size`, `temperature`, `rewards` (list), optional `masked` (member indices). Members of
    a group share a random prompt; each member has a sampled first turn, template/tool tokens (not trained) and a
    sampled second turn; member 1 of every group has a second sample (a re-rendered prompt: prefix break).
    Logprobs are left at 0; `fill_logprobs` sets them.
    """
    out = []
    for gid, g in enumerate(groups):
        prompt = rng.integers(3, 250, int(rng.integers(5, 9))).tolist()
        for k in range(g["size"]):
            samples = []
            for j in range(2 if k == 1 else 1):
                s = Sample()
                s.extend(prompt if j == 0 else rng.integers(3, 250, 4).tolist(), sampled=False)
                for turn in range(2):
                    n = int(rng.integers(2, 7))
                    s.extend(rng.integers(3, 250, n).tolist(), sampled=True, logprobs=[0.0] * n)
                    if turn == 0:
                        s.extend(rng.integers(3, 250, 3).tolist(), sampled=False)
                samples.append(s)
            masked = k in g.get("masked", ())
            out.append(
                Rollout(
                    task=Task(f"t{gid}", "train", gid, []),
                    source="test",
                    group_id=gid,
                    samples=samples,
                    reward=float(g["rewards"][k]),
                    masked=masked,
                    temperature=float(g["temperature"]),
                    policy_versions=[0],
                )
            )
    return out


def sample_logprobs(model: torch.nn.Module, ids: list[int], temperature: float) -> torch.Tensor:
    """[T] logprobs (lp[0] = 0) of one unpacked sample at `temperature`, from `model` (with grad if enabled)."""
    x = torch.tensor([ids])
    logits = model(x).logits[0].to(torch.float64)
    lp = torch.log_softmax(logits[:-1] / temperature, -1).gather(-1, x[0, 1:, None])[:, 0]
    return torch.cat([torch.zeros(1, dtype=lp.dtype), lp])


def fill_logprobs(rollouts: list[Rollout], behaviour: torch.nn.Module) -> None:
    """Set every sampled token's inference logprob to the behaviour model's (float64, stored as Python floats)."""
    with torch.no_grad():
        for r in rollouts:
            for s in r.samples:
                lp = sample_logprobs(behaviour, s.token_ids, r.temperature)
                s.logprobs = [float(lp[t]) if m else 0.0 for t, m in enumerate(s.loss_mask)]


def perturbed(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A copy of `model` with every weight w -> w + scale * std(w) * N(0, 1): a stale behaviour policy."""
    gen = torch.Generator().manual_seed(seed)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return out


def reference_gradient(
    model64: torch.nn.Module,
    rollouts: list[Rollout],
    kl_tau: float = 0.0,
    trust_region_delta: float | None = None,
    aggregation: str = "token-mean",
) -> dict[str, torch.Tensor]:
    """name -> d loss / d param (float64) of the importance-weighted policy gradient over `rollouts`' unmasked
    samples, normalised by their total loss-token count (module docstring); with `aggregation =
    "seq-mean-token-mean"` the policy-gradient term is instead each rollout's token mean averaged over the rollouts
    (GRPO as published), the KL term still over all loss tokens."""
    model64.zero_grad(set_to_none=True)
    live = [r for r in rollouts if not r.masked]
    n_tokens = sum(sum(s.loss_mask) for r in live for s in r.samples)
    n_rollouts = sum(1 for r in live if any(any(s.loss_mask) for s in r.samples))
    pg = torch.zeros((), dtype=torch.float64)
    kl = torch.zeros((), dtype=torch.float64)
    for r in live:
        n_r = sum(sum(s.loss_mask) for s in r.samples)
        w = 1.0 / n_tokens if aggregation == "token-mean" else 1.0 / (n_rollouts * max(n_r, 1))
        for s in r.samples:
            lp = sample_logprobs(model64, s.token_ids, r.temperature)
            for t, on in enumerate(s.loss_mask):
                if not on:
                    continue
                mu = s.logprobs[t]
                ratio = torch.exp(lp[t].detach() - mu)
                dp = float(torch.exp(lp[t].detach())) - float(np.exp(mu))
                a = r.advantage
                kept = trust_region_delta is None or not (
                    (a > 0 and dp > trust_region_delta) or (a < 0 and dp < -trust_region_delta)
                )
                if kept:
                    pg = pg - w * a * ratio * lp[t]
                kl = kl + kl_tau * (lp[t] - mu) ** 2
    (pg + kl / n_tokens).backward()
    return {n: p.grad.detach().clone() for n, p in model64.named_parameters()}


def install_probe(out_path: Path):
    """Before every optimizer step of this process, save the full (unsharded) gradients, in `parameters()` order,
    as `out_path` (rank 0 writes). Used around `prime_rl.trainer.rl.run` in-process and under torchrun. Returns the
    hook's handle (`.remove()` it)."""

    def hook(optimizer, args, kwargs):
        grads = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    g = torch.zeros_like(p)
                if hasattr(g, "full_tensor"):
                    g = g.full_tensor()
                grads.append(g.detach().to(torch.float64).clone())
        if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
            torch.save(grads, out_path)

    return register_optimizer_step_pre_hook(hook)


def compare(engine: list[torch.Tensor], reference: dict[str, torch.Tensor], rel: float = 2e-4) -> float:
    """Check each parameter's gradient: |g_engine - g_ref| / |g_ref| <= rel (Frobenius norms); returns the worst."""
    assert len(engine) == len(reference), (len(engine), len(reference))
    worst = 0.0
    for (name, ref), got in zip(reference.items(), engine, strict=True):
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        denom = float(ref.norm())
        err = float((got - ref).norm()) / max(denom, 1e-30)
        assert denom > 0, f"{name}: the reference gradient is zero (the test would not detect a mismatch)"
        assert err <= rel, f"{name}: relative gradient error {err:.2e} > {rel:.0e}"
        worst = max(worst, err)
    return worst
