"""Synthetic RL batches for trainer tests, with inference logprobs computed by a plain transformers forward
(one sample at a time, no packing: an implementation independent of `prime_rl.trainer.logprobs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from prime_rl.config.trainer import TrainerConfig
from prime_rl.transport.batch import MicroBatch, StepBatch, write_batch


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor's `full_tensor()` (FSDP2), a plain tensor as is (model.fsdp = auto at world 1)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def reference_logprobs(model, ids: list[int], temperature: float) -> np.ndarray:
    """lp[t] = log_softmax(logits[t-1] / T)[ids[t]] for t >= 1, lp[0] = 0, from an unpacked forward."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits / temperature, -1)
    out = np.zeros(len(ids), np.float32)
    for t in range(1, len(ids)):
        out[t] = lp[t - 1, ids[t]].item()
    return out


def make_samples(model_dir: Path, n: int, seed: int, temperature: float = 1.0, prompt_len: int = 4, comp_len: int = 6):
    """`n` samples: random prompt, random completion; advantage +1 when the completion starts with an even token,
    else -1. Returns a list of per-sample field dicts (arrays)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(0, 256, prompt_len + comp_len).tolist()
        adv = 1.0 if ids[prompt_len] % 2 == 0 else -1.0
        L = len(ids)
        mask = np.zeros(L, bool)
        mask[prompt_len:] = True
        out.append(
            dict(
                input_ids=np.array(ids),
                position_ids=np.arange(L),
                loss_mask=mask,
                advantages=np.where(mask, adv, 0.0).astype(np.float32),
                inference_logprobs=np.where(mask, reference_logprobs(model, ids, temperature), 0.0),
                temperature=np.full(L, temperature, np.float32),
            )
        )
    return out


def pack(samples: list[dict], n_micro: int) -> list[MicroBatch]:
    """Cut `samples` into `n_micro` contiguous groups, each packed into one micro-batch."""
    groups = np.array_split(np.arange(len(samples)), n_micro)
    mbs = []
    for g in groups:
        mbs.append(MicroBatch(**{k: np.concatenate([samples[i][k] for i in g]) for k in samples[0]}))
    return mbs


def write_stream(run_dir: Path, steps: dict[int, list[dict]], world_size: int = 1, micro_per_rank: int = 2) -> None:
    """Write rollouts/step_N/rank_R.bin for each step: samples split evenly over ranks, `micro_per_rank` each."""
    for step, samples in steps.items():
        total = int(sum(s["loss_mask"].sum() for s in samples))
        per_rank = np.array_split(np.arange(len(samples)), world_size)
        for r, idx in enumerate(per_rank):
            mbs = pack([samples[i] for i in idx], micro_per_rank)
            write_batch(
                Path(run_dir) / "rollouts" / f"step_{step}" / f"rank_{r}.bin",
                StepBatch(step=step, rank=r, world_size=world_size, total_loss_tokens=total, micro_batches=mbs),
            )


def trainer_config(model_dir: Path, run_dir: Path, **over) -> TrainerConfig:
    base = dict(
        model={"name": str(model_dir)},
        output_dir=str(run_dir),
        optim={"lr": 1e-2, "max_norm": 1.0},
        max_steps=3,
        seq_len=256,
        data_timeout_s=5.0,
        threads=1,
    )
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return TrainerConfig(**base)
