"""The RL trainer loop (`trainer @ config`, usually under torchrun).

Step N (N >= 1): wait for this rank's batch of step N (at most `data_timeout_s`; `rollouts/step_N/rank_R.bin`, or
asked of the orchestrator over TCP: `rollout_transport`, prime_rl.transport.rollouts), take one optimizer step on its
micro-batches (regrouped so a group's shared prompt runs once, with `shared_prefix`; concatenated up to
`micro_batch_tokens` tokens per forward pass when set) with the configured loss,
publish policy version N to `weights/step_N/` (+ STABLE), checkpoint every `ckpt.interval` steps, log. Stops
after `max_steps`. A step in which no loss token on any rank has a nonzero advantage is published without an update
(metric `no_signal`, only on such steps), unless the loss has a reference-KL term (`loss.ref_kl_coef > 0`) or a
teacher term (`loss.teacher_kl_coef > 0`, on-policy distillation), which train on such steps too. With
`ckpt.resume_step` set, continues at the step after the checkpoint's; with `ckpt.resume_dir` (another run's
checkpoint) likewise, in this run's output_dir, after publishing the checkpoint's policy version there.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from prime_rl.config.trainer import TrainerConfig
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.prometheus import start_metrics_server
from prime_rl.trainer.diagnostics import build_probe
from prime_rl.trainer.dist import all_reduce_max, all_reduce_sum, node_name
from prime_rl.trainer.engine import Engine, EngineConfig
from prime_rl.trainer.loss import get_loss
from prime_rl.trainer.reference import build_reference, has_ref_kl, reference_due
from prime_rl.trainer.shared_prefix import regroup
from prime_rl.transport.atomic import STABLE
from prime_rl.transport.batch import BatchFormatError, MicroBatch, concat_micro_batches
from prime_rl.transport.rollouts import build_receiver


def run(cfg: TrainerConfig) -> dict[str, float] | None:
    """The `trainer` command: `train`, its metrics forwarded to W&B when `[wandb]` is set (started on its own;
    under `rl` the launcher forwards them)."""
    from prime_rl.monitor.wandb_log import run_with_wandb

    return run_with_wandb(train, cfg, "trainer", {"trainer"})


def has_learning_signal(micro_batches: list[MicroBatch], device: torch.device, ref_kl: bool = False) -> bool:
    """Whether any loss token of this step, on any rank, has a nonzero advantage (collective: call on every rank);
    with `ref_kl` (the loss has a reference-KL or teacher term, which trains on zero-advantage tokens too) whether any
    rank has a loss token at all.

    Without one (every group's rewards equal, e.g. all 0) the step has no learning signal, but its gradient is not
    exactly 0 (float rounding, the KL term) and AdamW normalises it per parameter into an update of up to ~lr, so
    the policy would drift with no reward. The trainer skips such a step's update.
    """
    if ref_kl:
        mine = any(bool(np.any(mb.loss_mask)) for mb in micro_batches)
    else:
        mine = any(bool(np.any(mb.advantages[mb.loss_mask] != 0)) for mb in micro_batches)
    return all_reduce_sum(torch.tensor([float(mine)], dtype=torch.float32, device=device)).item() > 0


def train(cfg: TrainerConfig) -> dict[str, float] | None:
    """Train until `max_steps` (or until no batch arrives within `data_timeout_s`: TimeoutError).

    Returns the last step's metrics (all ranks).

    Raises:
        TimeoutError: the next step's batch did not arrive in time (names the file or the orchestrator's address).
        BatchFormatError: a batch's step, rank or world size does not match this process.
        RolloutTransportError: (tcp) the orchestrator refused the ask (a step it no longer holds, a world size
            other than orchestrator.num_train_ranks, a missing or wrong rollout_transport.token).
    """
    setup_logging("trainer", cfg.output_dir, cfg.log.level)
    loss = get_loss(cfg.loss)
    engine = Engine(EngineConfig.from_config(cfg), process="trainer")
    probe = build_probe(cfg, engine.dist.device)
    reference = build_reference(cfg, engine.dist.device)
    ref_kl = has_ref_kl(cfg) or float(getattr(cfg.loss, "teacher_kl_coef", 0.0)) > 0  # terms that train at A = 0
    last: dict[str, float] | None = None
    prom = receiver = None
    try:
        prom = start_metrics_server("trainer", cfg.metrics_server) if engine.dist.is_main else None
        engine.maybe_resume()
        if cfg.ckpt.resume_dir is not None and engine.step > 0 and not (engine.run_dir.weight_step(engine.step) / STABLE).is_file():
            engine.publish(engine.step)  # a forked run: the orchestrator starts from the checkpoint's policy version
        rank, world = engine.dist.rank, engine.dist.world_size
        engine.log.info(
            f"trainer rank {rank}/{world} on {engine.dist.device}, node {node_name()}, starting at step {engine.step + 1}"
            f" (max_steps={cfg.max_steps})"
        )
        step = engine.step + 1
        receiver = build_receiver(cfg.rollout_transport, engine.run_dir.root, rank=rank, world_size=world,
                                  timeout_s=cfg.data_timeout_s)  # fmt: skip
        if cfg.weight_transport.type == "collective" and engine.dist.is_main and hasattr(receiver, "announce"):
            engine.announce_version = receiver.announce  # tcp: the orchestrator may not see this node's weights/
        resumable = engine.step  # the newest step this rank can resume from (0: none)
        while cfg.max_steps is None or step <= cfg.max_steps:
            t_wait = time.perf_counter()
            batch = receiver.receive(step, keep_from=resumable + 1 if cfg.ckpt.interval is not None else step)
            wait_s = time.perf_counter() - t_wait
            if batch.step != step or batch.rank != rank or batch.world_size != world:
                raise BatchFormatError(
                    f"{receiver.source(step)}: holds step {batch.step} rank {batch.rank} of world {batch.world_size}, expected step "
                    f"{step} rank {rank} of world {world} (orchestrator.num_train_ranks must equal the trainer's "
                    "process count)"
                )
            mbs = batch.micro_batches
            if cfg.shared_prefix or cfg.micro_batch_tokens is not None:
                if cfg.shared_prefix:
                    mbs = regroup(mbs, cfg.micro_batch_size)
                else:
                    mbs = concat_micro_batches(mbs, cfg.micro_batch_tokens)
                most = int(all_reduce_max(torch.tensor([float(len(mbs)), 1.0], dtype=torch.float64)).max().item())
                mbs += [MicroBatch.empty_like(1) for _ in range(most - len(mbs))]  # same count on every rank
            signal = has_learning_signal(batch.micro_batches, engine.dist.device, ref_kl)
            ref_now = reference if reference is not None and reference_due(cfg, step) else None
            metrics = engine.train_step(mbs, batch.total_loss_tokens, loss, cfg.loss, probe, skip_update=not signal,
                                        reference=ref_now)
            if not signal and batch.total_loss_tokens > 0:
                metrics["no_signal"] = 1.0  # only on such steps: the metrics rows of ordinary runs stay as they were
            t_pub = time.perf_counter()
            engine.publish(step)
            metrics["publish_s"] = time.perf_counter() - t_pub
            if engine.maybe_checkpoint(step) is not None:
                resumable = step
            metrics["data_wait_s"] = wait_s
            engine.log_step(step, metrics, console=loss.console)
            if prom is not None:
                prom.trainer_step(step, metrics)
            last = metrics
            step += 1
        if cfg.max_steps is not None and last is not None:
            receiver.finish(step - 1)  # tcp: the orchestrator may end once every rank took its last step
    finally:
        if receiver is not None:
            receiver.close()
        if prom is not None:
            prom.close()
        engine.close()
    return last
