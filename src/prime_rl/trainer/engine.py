"""The training engine shared by RL (`rl.py`) and SFT (`sft.py`): one code path for process group, model (LoRA,
FSDP2), optimizer and schedule, the optimizer step over packed micro-batches, weight publishing, checkpoints
and step logging.

One optimizer step (`Engine.train_step`) over this rank's micro-batches, with N = the step's global count of
loss tokens (all micro-batches and ranks):

    loss = sum over micro-batches and ranks of loss_fn(micro-batch).loss / N

Each rank back-propagates its part times `world_size`, because FSDP2 averages gradients over ranks; the
summed gradient is then exactly d loss / d params whatever the cut into micro-batches and ranks.
"""

from __future__ import annotations

import math
import random
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from prime_rl.config.base import CheckpointConfig
from prime_rl.config.trainer import LossConfig, OptimizerConfig, SchedulerConfig, TrainerModelConfig, WeightsConfig
from prime_rl.monitor.logger import get_logger
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.rundir import RunDir
from prime_rl.trainer.ckpt import find_checkpoint, load_checkpoint, save_checkpoint
from prime_rl.trainer.dist import DistInfo, all_reduce_max, all_reduce_sum, close_distributed, init_distributed
from prime_rl.trainer.logprobs import compute_logprobs
from prime_rl.trainer.loss import LossFn, LossInputs
from prime_rl.trainer.model import compute_dtype, load_model, trainable_parameters
from prime_rl.trainer.optim import build_optimizer, build_scheduler
from prime_rl.trainer.shared_prefix import SharedPrefixMicroBatch, shared_prefix_logprobs
from prime_rl.trainer.weights import publish_weights
from prime_rl.transport.batch import MicroBatch


@dataclass
class EngineConfig:
    """The settings the engine needs (both TrainerConfig and SFTConfig provide them)."""

    model: TrainerModelConfig
    optim: OptimizerConfig
    scheduler: SchedulerConfig
    weights: WeightsConfig
    ckpt: CheckpointConfig
    output_dir: Path
    max_steps: int | None
    seq_len: int
    seed: int
    threads: int | None

    @classmethod
    def from_config(cls, cfg: Any) -> EngineConfig:
        return cls(**{f: getattr(cfg, f) for f in cls.__dataclass_fields__})


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory of this process in GiB: CUDA max allocated on GPU, peak RSS (ru_maxrss) on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Engine:
    """Owns the process group, model, optimizer, scheduler and run-directory outputs of one training process."""

    def __init__(self, cfg: EngineConfig, process: str = "trainer"):
        self.cfg = cfg
        self.process = process
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.dist: DistInfo = init_distributed()
        self.run_dir = RunDir(Path(cfg.output_dir))
        self.log = get_logger(process)
        seed_everything(cfg.seed)  # same on every rank: LoRA init must agree across FSDP ranks
        self.model: nn.Module = load_model(cfg.model, self.dist)
        self.dtype = compute_dtype(cfg.model, self.dist.device)
        self.params = trainable_parameters(self.model)
        self.optimizer = build_optimizer(self.params, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.scheduler, cfg.max_steps)
        self.metrics = MetricsWriter(self.run_dir.root, process) if self.dist.is_main else None
        self.step = 0  # optimizer steps taken
        self.progress: dict[str, Any] = {}

    # ----- one optimizer step -------------------------------------------------------------------------------
    def train_step(
        self,
        micro_batches: list[MicroBatch | SharedPrefixMicroBatch],
        total_loss_tokens: int,
        loss_fn: LossFn,
        loss_cfg: LossConfig | None,
    ) -> dict[str, float]:
        """Forward/backward every micro-batch of this rank, clip, step AdamW and the schedule.

        With `total_loss_tokens == 0` the optimizer step is skipped (weights and AdamW state unchanged).

        Returns step metrics (identical on all ranks): `loss`, `entropy` (mean over loss tokens),
        the loss function's metrics, `grad_norm` (before clipping), `lr` (used for this step), `tokens`,
        `loss_tokens`, `step_time_s`, `tokens_per_s`, `peak_mem_gib` (max over ranks).

        Raises:
            ValueError: ranks hold different numbers of micro-batches, a micro-batch is longer than `seq_len`,
                or a loss token sits at the start of a packed sample (it has no prediction).
        """
        t0 = time.perf_counter()
        dev, world = self.dist.device, self.dist.world_size
        n_mb = len(micro_batches)
        counts = all_reduce_max(torch.tensor([n_mb, -n_mb], dtype=torch.float64))
        if n_mb == 0 or counts[0].item() != n_mb or -counts[1].item() != n_mb:
            raise ValueError(
                f"rank {self.dist.rank} has {n_mb} micro-batches but ranks range {-counts[1].item():.0f}.."
                f"{counts[0].item():.0f}: every rank's file of a step must hold the same (non-zero) number"
            )
        norm = float(max(int(total_loss_tokens), 1))
        self.optimizer.zero_grad(set_to_none=True)
        fsdp = self.cfg.model.fsdp
        sums: dict[str, list[float]] = {}
        loss_sum = ent_sum = tokens = mask_tokens = 0.0
        for i, mb in enumerate(micro_batches):
            if fsdp:
                self.model.set_requires_gradient_sync(i == n_mb - 1)
            inputs, ent, n_tokens = self._forward(i, mb)
            out = loss_fn(inputs, loss_cfg)
            mask = inputs.loss_mask
            (out.loss * (world / norm)).backward()
            loss_sum += float(out.loss.detach())
            ent_sum += float(ent[mask].sum())
            mask_tokens += float(mask.sum())
            tokens += n_tokens
            for k, (num, den) in out.metrics.items():
                acc = sums.setdefault(k, [0.0, 0.0])
                acc[0] += float(num)
                acc[1] += float(den)
        max_norm = self.cfg.optim.max_norm if self.cfg.optim.max_norm is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        lr = self.optimizer.param_groups[0]["lr"]
        # A step with no loss token anywhere (e.g. every rollout masked) must not move the weights: AdamW's
        # momentum would still change them with zero gradients. The schedule advances so lr stays tied to step.
        skipped = int(total_loss_tokens) == 0
        if not skipped:
            self.optimizer.step()
        self.scheduler.step()
        self.step += 1

        keys = sorted(sums)
        vec = torch.tensor([loss_sum, ent_sum, mask_tokens, tokens] + [v for k in keys for v in sums[k]], dtype=torch.float64)
        all_reduce_sum(vec)
        dt = time.perf_counter() - t0
        mem = all_reduce_max(torch.tensor([peak_memory_gib(dev)], dtype=torch.float64))
        m: dict[str, float] = {
            "loss": vec[0].item() / norm,
            "entropy": vec[1].item() / max(vec[2].item(), 1.0),
            "grad_norm": float(grad_norm),
            "lr": lr,
            "tokens": vec[3].item(),
            "loss_tokens": vec[2].item(),
            "step_time_s": dt,
            "tokens_per_s": vec[3].item() / dt,
            "peak_mem_gib": mem[0].item(),
            "skipped_update": float(skipped),
        }
        for j, k in enumerate(keys):
            num, den = vec[4 + 2 * j].item(), vec[5 + 2 * j].item()
            m[k] = num / den if den > 0 else 0.0
        return m

    def _forward(self, i: int, mb: MicroBatch | SharedPrefixMicroBatch) -> tuple[LossInputs, torch.Tensor, int]:
        """Micro-batch `i` -> (loss inputs [T] with trainer logprobs attached, entropy [T], sample tokens).

        A `SharedPrefixMicroBatch` is flattened to [K*S] tokens; its sample tokens count the prefix once per
        sample, like packing would. Raises ValueError on the checks listed in `train_step`.
        """
        dev = self.dist.device
        if isinstance(mb, SharedPrefixMicroBatch):
            if mb.sample_len > self.cfg.seq_len:
                raise ValueError(f"micro-batch {i} has a {mb.sample_len}-token sample > seq_len = {self.cfg.seq_len}")
            mask = torch.from_numpy(mb.loss_mask).to(dev).reshape(-1)
            temp = torch.from_numpy(mb.temperature).float().to(dev).reshape(-1)
            inf_lp = torch.from_numpy(mb.inference_logprobs).float().to(dev).reshape(-1)
            self._check_sampling(i, mask, temp, inf_lp)
            lp, ent = shared_prefix_logprobs(self.model, mb, dev)
            adv = torch.from_numpy(mb.advantages).float().to(dev).reshape(-1)
            n = mb.num_samples * len(mb.prefix_ids) + int(mb.valid.sum())
            return LossInputs(lp.reshape(-1), inf_lp, adv, mask), ent.reshape(-1), n
        if len(mb) > self.cfg.seq_len:
            raise ValueError(f"micro-batch {i} has {len(mb)} tokens > seq_len = {self.cfg.seq_len}")
        ids = torch.from_numpy(mb.input_ids).long().to(dev)
        pos = torch.from_numpy(mb.position_ids).long().to(dev)
        mask = torch.from_numpy(mb.loss_mask).to(dev)
        starts = pos == 0
        starts[0] = True
        if bool((mask & starts).any()):
            raise ValueError(
                f"micro-batch {i}: loss_mask is true at a sample's first token (position_ids == 0), "
                "which has no prediction; the first token of each sample must be a prompt token"
            )
        temp = torch.from_numpy(mb.temperature).float().to(dev)
        inf_lp = torch.from_numpy(mb.inference_logprobs).float().to(dev)
        self._check_sampling(i, mask, temp, inf_lp)
        temp = torch.where(temp > 0, temp, torch.ones_like(temp))  # non-loss tokens: any value is harmless
        lp, ent = compute_logprobs(self.model, ids, pos, temp)
        adv = torch.from_numpy(mb.advantages).float().to(dev)
        return LossInputs(lp, inf_lp, adv, mask), ent, len(mb)

    @staticmethod
    def _check_sampling(i: int, mask: torch.Tensor, temp: torch.Tensor, inf_lp: torch.Tensor) -> None:
        if bool((mask & ~(temp > 0)).any()) or not bool(torch.isfinite(inf_lp[mask]).all()):
            raise ValueError(
                f"micro-batch {i}: a loss token has temperature <= 0 or a non-finite inference logprob; "
                "RL needs sampling at temperature > 0 with logprobs returned"
            )

    # ----- outputs -----------------------------------------------------------------------------------------
    def publish(self, step: int) -> Path | None:
        """Write policy version `step` to `weights/step_<step>/` + STABLE (collective)."""
        return publish_weights(
            self.model, self.run_dir.weights, step, self.cfg.weights, Path(self.cfg.model.name), self.dist, self.dtype
        )

    def maybe_checkpoint(self, step: int, progress: dict[str, Any] | None = None, force: bool = False) -> Path | None:
        """Save `checkpoints/step_<step>/trainer/` when `ckpt.interval` divides `step` (or `force`)."""
        iv = self.cfg.ckpt.interval
        if not force and (iv is None or step % iv):
            return None
        prog = {"step": step, **(progress or {})}
        return save_checkpoint(
            self.run_dir.checkpoints, step, self.model, self.optimizer, self.scheduler, prog, self.dist,
            self.cfg.ckpt.keep_last,
        )

    def maybe_resume(self) -> dict[str, Any] | None:
        """Load the checkpoint named by `ckpt.resume_step` (-1 = newest complete); returns its progress or None."""
        rs = self.cfg.ckpt.resume_step
        if rs is None:
            return None
        path = find_checkpoint(self.run_dir.checkpoints, rs)
        progress = load_checkpoint(path, self.model, self.optimizer, self.scheduler, self.dist)
        self.step = int(progress["step"])
        self.log.info(f"resumed from {path} (step {self.step})")
        return progress

    def log_step(self, step: int, m: dict[str, Any], extra_keys: tuple[str, ...] = ()) -> None:
        """metrics.jsonl row (rank 0) and one console line."""
        if not self.dist.is_main:
            return
        self.metrics.log(step, m)
        of = f"/{self.cfg.max_steps}" if self.cfg.max_steps else ""
        parts = [f"step {step}{of}", f"loss {m['loss']:.4f}"]
        for k in ("entropy", "mismatch_kl", "masked_frac_pos", "masked_frac_neg", *extra_keys):
            if k in m:
                parts.append(f"{k} {m[k]:.4g}")
        parts += [
            f"grad_norm {m['grad_norm']:.3g}",
            f"lr {m['lr']:.2e}",
            f"{m['tokens_per_s']:.0f} tok/s",
            f"mem {m['peak_mem_gib']:.2f} GiB",
        ]
        self.log.info(" | ".join(parts))

    def close(self) -> None:
        close_distributed(self.dist)
