"""The training engine shared by RL (`rl.py`) and SFT (`sft.py`): one code path for process group, model (LoRA,
FSDP2), optimizer and schedule, the optimizer step over packed micro-batches, weight publishing, checkpoints
and step logging.

One optimizer step (`Engine.train_step`) over this rank's micro-batches, with N = the step's global count of
loss tokens (all micro-batches and ranks):

    loss = sum over micro-batches and ranks of loss_fn(micro-batch).loss / N

Each rank back-propagates its part times `world_size`, because FSDP2 averages gradients over ranks; the
summed gradient is then exactly d loss / d params whatever the cut into micro-batches and ranks.

A step whose loss (on any rank's micro-batch) or gradient norm is not finite is skipped: weights and AdamW state
stay as they were, the log names the step and micro-batch, and after `optim.max_nonfinite_steps` such steps in a
row `TrainingDiverged` stops the run (docs/design.md invariant 7).
"""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from prime_rl.config.base import CheckpointConfig
from prime_rl.config.trainer import OptimizerConfig, SchedulerConfig, TrainerModelConfig, WeightsConfig
from prime_rl.config.weight_transport import WeightTransportConfig
from prime_rl.monitor.logger import get_logger
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.progress import metric_title, step_line
from prime_rl.monitor.rundir import RunDir
from prime_rl.trainer import logprobs as _packed_forward  # noqa: F401  (registers the packed micro-batch forward)
from prime_rl.trainer import shared_prefix as _shared_prefix_forward  # noqa: F401  (registers its forward)
from prime_rl.trainer.ckpt import find_checkpoint, load_checkpoint, save_checkpoint
from prime_rl.trainer.dist import DistInfo, all_reduce_max, all_reduce_sum, close_distributed, init_distributed
from prime_rl.trainer.forward import ForwardOutput, forward_micro_batch
from prime_rl.trainer.loss import LossFn
from prime_rl.trainer.model import compute_dtype, load_model, trainable_parameters, use_fsdp
from prime_rl.trainer.optim import build_optimizer, build_scheduler
from prime_rl.trainer.publish import publish_weights


class TrainingDiverged(RuntimeError):
    """`optim.max_nonfinite_steps` consecutive steps had a non-finite loss or gradient norm (each one skipped)."""


MetricProbe = Callable[[ForwardOutput, Any], dict[str, tuple[float, float]]]
"""Extra per-micro-batch metrics: (forward output, micro-batch) -> name -> (numerator, denominator)."""


@dataclass
class StepSums:
    """This rank's running sums over a step's micro-batches (before the all-reduce)."""

    loss: float = 0.0
    entropy: float = 0.0
    loss_tokens: float = 0.0
    tokens: float = 0.0
    pairs: dict[str, list[float]] = field(default_factory=dict)
    nonfinite: list[int] = field(default_factory=list)  # this rank's micro-batches whose loss is not finite
    nonfinite_grad: list[int] = field(default_factory=list)  # ... whose loss gradient wrt the logprobs is not

    def add(self, key: str, num: float, den: float) -> None:
        acc = self.pairs.setdefault(key, [0.0, 0.0])
        acc[0] += num
        acc[1] += den


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
    micro_batch_tokens: int | None = None  # RL: micro-batches concatenated up to this (TrainerConfig)
    weight_transport: WeightTransportConfig | None = None  # RL: files (None, filesystem) or the weight group

    @classmethod
    def from_config(cls, cfg: Any) -> EngineConfig:
        return cls(**{f: getattr(cfg, f) for f in cls.__dataclass_fields__ if hasattr(cfg, f)})


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
        self.fsdp = use_fsdp(cfg.model, self.dist)
        self.dtype = compute_dtype(cfg.model, self.dist.device, self.dist.world_size)
        self.params = trainable_parameters(self.model)
        self.optimizer = build_optimizer(self.params, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.scheduler, cfg.max_steps)
        self.metrics = MetricsWriter(self.run_dir.root, process) if self.dist.is_main else None
        self.step = 0  # optimizer steps taken
        self.progress: dict[str, Any] = {}
        self._weight_publisher = None  # weight_transport.type = "collective": built at the first publish
        # rank 0, collective weights with tcp rollouts: tells the orchestrator a version is ready (ZmqReceiver.announce)
        self.announce_version: Callable[[int], None] | None = None
        self.nonfinite_streak = 0  # consecutive steps skipped for a non-finite loss or gradient norm
        self.max_tokens = max(cfg.seq_len, cfg.micro_batch_tokens or 0)  # the longest micro-batch accepted

    # ----- one optimizer step -------------------------------------------------------------------------------
    def train_step(
        self,
        micro_batches: list[Any],
        total_loss_tokens: int,
        loss_fn: LossFn,
        loss_cfg: Any,
        probe: MetricProbe | None = None,
        skip_update: bool = False,
        reference: Callable[[Any], torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """One optimizer step: `forward_backward` over this rank's micro-batches, then `optimizer_step`.

        With `total_loss_tokens == 0`, or `skip_update` (the caller found no learning signal; it must pass the same
        value on every rank), the optimizer step is skipped (weights and AdamW state unchanged; the metrics are still
        computed); so it is when the loss of any micro-batch on any rank, or the gradient norm, is not finite
        (logged, naming the step and micro-batch). `probe(fwd, mb)`, if given, adds (numerator, denominator) metrics
        per micro-batch (no grad). `reference(mb)`, if given, returns the micro-batch's [T] reference-policy
        logprobs (`prime_rl.trainer.reference`), put in `LossInputs.ref_logprobs` before the loss and the probe run.

        Returns step metrics (identical on all ranks): `loss`, `entropy` (mean over loss tokens),
        the loss function's metrics, `logp_grad_norm/<term>` for a loss that returns terms, the probe's metrics,
        `grad_norm` (before clipping), `lr` (used for this step), `tokens`, `loss_tokens`, `step_time_s`,
        `tokens_per_s`, `peak_mem_gib` (max over ranks), `skipped_update` (1 when the weights did not move),
        `nonfinite` (1 when skipped for a non-finite loss or gradient norm).

        Raises:
            ValueError: ranks hold different numbers of micro-batches, a micro-batch is longer than `seq_len`,
                or a loss token sits at the start of a packed sample (it has no prediction).
            TrainingDiverged: the `optim.max_nonfinite_steps`-th non-finite step in a row.
        """
        t0 = time.perf_counter()
        self._check_micro_batch_counts(len(micro_batches))
        norm = float(max(int(total_loss_tokens), 1))
        sums = self.forward_backward(micro_batches, loss_fn, loss_cfg, norm, probe, reference)
        # A step with no loss token anywhere (e.g. every rollout masked) must not move the weights: AdamW's
        # momentum would still change them with zero gradients. The schedule advances so lr stays tied to step.
        skipped = int(total_loss_tokens) == 0 or skip_update
        flag = torch.tensor([float(bool(sums.nonfinite))], dtype=torch.float32, device=self.dist.device)
        bad_ranks = int(all_reduce_sum(flag).item())  # ranks with a non-finite micro-batch loss
        grad_norm, lr = self.optimizer_step(skip=skipped or bad_ranks > 0)
        nonfinite = bad_ranks > 0 or not math.isfinite(grad_norm)
        metrics = self._step_metrics(sums, norm, grad_norm, lr, skipped or nonfinite, t0)
        metrics["nonfinite"] = float(nonfinite)
        self._check_finite_step(nonfinite, sums, grad_norm)
        return metrics

    def _check_finite_step(self, nonfinite: bool, sums: StepSums, grad_norm: float) -> None:
        """Log a skipped non-finite step (each rank names its own micro-batches) and count the streak.

        Raises:
            TrainingDiverged: `optim.max_nonfinite_steps` such steps in a row.
        """
        if not nonfinite:
            self.nonfinite_streak = 0
            return
        self.nonfinite_streak += 1
        step, limit = self.step, self.cfg.optim.max_nonfinite_steps
        rank = self.dist.rank
        if sums.nonfinite:
            where = f"non-finite loss in micro-batch(es) {sums.nonfinite} of rank {rank}"
        elif sums.nonfinite_grad:
            where = f"non-finite gradient (norm {grad_norm}) from micro-batch(es) {sums.nonfinite_grad} of rank {rank}"
        else:
            where = f"non-finite gradient norm ({grad_norm})"
        self.log.warning(f"step {step}: {where}; update skipped (weights and optimizer state unchanged), "
                         f"{self.nonfinite_streak} such step(s) in a row (optim.max_nonfinite_steps = {limit})")  # fmt: skip
        if self.nonfinite_streak >= limit:
            raise TrainingDiverged(
                f"training diverged: {self.nonfinite_streak} consecutive steps (the last: step {step}, {where}) had a "
                f"non-finite loss or gradient norm (optim.max_nonfinite_steps = {limit}). Lower optim.lr or "
                "optim.max_norm, check the loss, and resume from a checkpoint before the divergence "
                "(--ckpt.resume-step N)"
            )

    def _check_micro_batch_counts(self, n_mb: int) -> None:
        counts = all_reduce_max(torch.tensor([n_mb, -n_mb], dtype=torch.float64))
        if n_mb == 0 or counts[0].item() != n_mb or -counts[1].item() != n_mb:
            raise ValueError(
                f"rank {self.dist.rank} has {n_mb} micro-batches but ranks range {-counts[1].item():.0f}.."
                f"{counts[0].item():.0f}: every rank's file of a step must hold the same (non-zero) number"
            )

    def forward_backward(
        self,
        micro_batches: list[Any],
        loss_fn: LossFn,
        loss_cfg: Any,
        norm: float,
        probe: MetricProbe | None = None,
        reference: Callable[[Any], torch.Tensor] | None = None,
    ) -> StepSums:
        """Zero the gradients, then forward and backward every micro-batch: afterwards the gradients hold
        d(loss)/d(params) with loss = sum over micro-batches and ranks of loss_fn(mb).loss / `norm`. Each rank
        back-propagates its part times `world_size` (FSDP2 averages gradients over ranks); FSDP2 synchronises
        gradients only after the last micro-batch. Returns this rank's (not yet all-reduced) metric sums."""
        world = self.dist.world_size
        self.optimizer.zero_grad(set_to_none=True)
        n_mb = len(micro_batches)
        sums = StepSums()
        grad_ok: list[tuple[int, torch.Tensor]] = []  # (micro-batch, is d loss / d logprobs finite), read at the end
        for i, mb in enumerate(micro_batches):
            if self.fsdp:
                self.model.set_requires_gradient_sync(i == n_mb - 1)
            fwd = forward_micro_batch(mb, self.model, index=i, seq_len=self.max_tokens, device=self.dist.device)
            if reference is not None:
                fwd.inputs.ref_logprobs = reference(mb)
            out = loss_fn(fwd.inputs, loss_cfg)
            lp = fwd.inputs.trainer_logprobs
            for name, term in out.terms.items():  # d term / d logprobs: through the loss only, not the model
                term_grad = None
                if term.requires_grad and lp.requires_grad:
                    (term_grad,) = torch.autograd.grad(term, lp, retain_graph=True, allow_unused=True)
                sq_norm = 0.0 if term_grad is None else float(term_grad.double().square().sum())
                sums.add(f"logp_grad_norm/{name}", sq_norm, 0.0)
            if lp.requires_grad:
                lp.register_hook(lambda g, i=i: grad_ok.append((i, torch.isfinite(g).all())))
            (out.loss * (world / norm)).backward()
            mask = fwd.inputs.loss_mask
            loss_value = float(out.loss.detach())
            if not math.isfinite(loss_value):
                sums.nonfinite.append(i)
            sums.loss += loss_value
            sums.entropy += float(fwd.entropy[mask].sum())
            sums.loss_tokens += float(mask.sum())
            sums.tokens += fwd.num_tokens
            for metric, (num, den) in out.metrics.items():
                sums.add(metric, float(num), float(den))
            if probe is not None:
                with torch.no_grad():
                    for metric, (num, den) in probe(fwd, mb).items():
                        sums.add(metric, float(num), float(den))
        if grad_ok:  # one device sync for the whole step
            flags = torch.stack([ok for _, ok in grad_ok]).tolist()
            sums.nonfinite_grad = [i for (i, _), ok in zip(grad_ok, flags, strict=True) if not ok]
        return sums

    def optimizer_step(self, skip: bool = False) -> tuple[float, float]:
        """Clip the gradients to `optim.max_norm`, step AdamW (unless `skip`, or the gradient norm is not finite)
        and the schedule.

        Returns (grad norm before clipping, the lr this step used)."""
        max_norm = self.cfg.optim.max_norm if self.cfg.optim.max_norm is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm = float(grad_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if not skip and math.isfinite(grad_norm):
            self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return grad_norm, lr

    def _step_metrics(
        self, sums: StepSums, norm: float, grad_norm: float, lr: float, skipped: bool, t0: float
    ) -> dict[str, float]:
        keys = sorted(sums.pairs)
        vec = torch.tensor(
            [sums.loss, sums.entropy, sums.loss_tokens, sums.tokens] + [v for k in keys for v in sums.pairs[k]],
            dtype=torch.float64,
        )
        all_reduce_sum(vec)
        dt = time.perf_counter() - t0
        mem = all_reduce_max(torch.tensor([peak_memory_gib(self.dist.device)], dtype=torch.float64))
        metrics: dict[str, float] = {
            "loss": vec[0].item() / norm,
            "entropy": vec[1].item() / max(vec[2].item(), 1.0),
            "grad_norm": grad_norm,
            "lr": lr,
            "tokens": vec[3].item(),
            "loss_tokens": vec[2].item(),
            "step_time_s": dt,
            "tokens_per_s": vec[3].item() / dt,
            "peak_mem_gib": mem[0].item(),
            "skipped_update": float(skipped),
        }
        for j, key in enumerate(keys):
            num, den = vec[4 + 2 * j].item(), vec[5 + 2 * j].item()
            if key.startswith("logp_grad_norm/"):
                metrics[key] = math.sqrt(num) / norm
            else:
                metrics[key] = num / den if den > 0 else 0.0
        return metrics

    # ----- outputs -----------------------------------------------------------------------------------------
    def publish(self, step: int) -> Path | None:
        """Write policy version `step` to `weights/step_<step>/` + STABLE (collective over the ranks); with
        `weight_transport.type = "collective"`, send it over the weight group instead (`publish_collective`)."""
        from prime_rl.models.hub import resolve_model

        wt = self.cfg.weight_transport
        if wt is not None and wt.type == "collective":
            from prime_rl.trainer.publish_collective import CollectivePublisher

            if self._weight_publisher is None:
                self._weight_publisher = CollectivePublisher(wt, self.dist)
            self._weight_publisher.announce = self.announce_version
            sent = self._weight_publisher.publish(self.model, self.run_dir.weights, step, self.cfg.weights, self.dtype)
            if sent is not None:
                self.log.info(f"policy version {step}: {sent['num_tensors']} tensors ({sent['bytes'] / 2**20:.1f} MiB) "
                              f"sent to the inference workers in {sent['send_s']:.3f} s")  # fmt: skip
            return self.run_dir.weight_step(step) if self.dist.is_main else None

        return publish_weights(
            self.model, self.run_dir.weights, step, self.cfg.weights, resolve_model(self.cfg.model.name), self.dist,
            self.dtype, chat_template=self.cfg.model.chat_template,
        )

    def maybe_checkpoint(self, step: int, progress: dict[str, Any] | None = None, force: bool = False) -> Path | None:
        """Save `checkpoints/step_<step>/trainer/` when `ckpt.interval` divides `step` (or `force`)."""
        iv = self.cfg.ckpt.interval
        if not force and (iv is None or step % iv):
            return None
        prog = {"step": step, **(progress or {})}
        return save_checkpoint(
            self.run_dir.checkpoints, step, self.model, self.optimizer, self.scheduler, prog, self.dist,
            self.cfg.ckpt.keep_last, self.cfg.ckpt.keep_interval,
        )

    def maybe_resume(self) -> dict[str, Any] | None:
        """Load the checkpoint named by `ckpt.resume_step` (-1 = newest complete) or `ckpt.resume_dir` (another
        run's `checkpoints/step_N`), leaving fresh what `ckpt.skip_optimizer` / `skip_scheduler` name, at step 0
        with `skip_progress`; returns its progress or None."""
        ck = self.cfg.ckpt
        if not ck.resuming:
            if ck.skips:
                self.log.warning(f"ckpt.{', ckpt.'.join(ck.skips)} set, but neither ckpt.resume_step nor "
                                 "ckpt.resume_dir: nothing is resumed, so nothing is skipped")  # fmt: skip
            return None
        if ck.resume_dir is not None:
            path = find_checkpoint(Path(ck.resume_dir).parent, int(Path(ck.resume_dir).name[len("step_"):]))
        else:
            path = find_checkpoint(self.run_dir.checkpoints, ck.resume_step)
        if ck.skip_dataloader:
            self.log.warning("ckpt.skip_dataloader has no effect on the trainer: its data order has no state (the "
                             "orchestrator's task stream does: orchestrator.ckpt.skip_dataloader)")  # fmt: skip
        progress = load_checkpoint(path, self.model, self.optimizer, self.scheduler, self.dist,
                                   skip_optimizer=ck.skip_optimizer, skip_scheduler=ck.skip_scheduler)  # fmt: skip
        self.step = 0 if ck.skip_progress else int(progress["step"])
        skipped = f", fresh: {', '.join(s.removeprefix('skip_') for s in ck.skips)}" if ck.skips else ""
        self.log.info(f"resumed from {path} (checkpoint step {progress['step']}, next step {self.step + 1}{skipped})")
        return progress

    def log_step(self, step: int, metrics: dict[str, Any], console: tuple[str, ...] = ()) -> None:
        """metrics.jsonl row (rank 0) and one console line: loss, entropy, the `console` metrics (those a loss
        declares, e.g.), grad norm, lr, throughput and memory; for a skipped update, why it was skipped."""
        if not self.dist.is_main:
            return
        self.metrics.log(step, metrics)
        max_steps = self.cfg.max_steps
        tail = [f"LR {metrics['lr']:.2e}", f"{metrics['tokens_per_s']:.0f} tok/s",
                f"Mem {metrics['peak_mem_gib']:.2f} GiB"]
        if metrics.get("nonfinite"):
            why = f"non-finite loss or gradient (loss {metrics['loss']:.4g}, grad_norm {metrics['grad_norm']:.4g})"
            self.log.info(step_line(step, max_steps, [f"Update skipped: {why}", *tail]))
            return
        if metrics.get("skipped_update"):
            why = "no loss tokens in this step's batch (every sample masked or filtered)"
            if metrics.get("no_signal"):
                why = "every loss token's advantage is 0 (equal rewards in every group: no learning signal)"
            self.log.info(step_line(step, max_steps, [f"Update skipped: {why}", *tail]))
            return
        parts = [f"Loss {metrics['loss']:.4f}"]
        for key in ("entropy", *console):
            if key in metrics:
                parts.append(f"{metric_title(key)} {metrics[key]:.4g}")
        self.log.info(step_line(step, max_steps, [*parts, f"Grad Norm {metrics['grad_norm']:.3g}", *tail]))

    def close(self) -> None:
        if self._weight_publisher is not None:
            self._weight_publisher.close()
        close_distributed(self.dist)
