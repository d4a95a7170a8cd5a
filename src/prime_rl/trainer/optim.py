"""AdamW and the learning-rate schedule (constant / linear / cosine, each with linear warmup)."""

from __future__ import annotations

import math

import torch
from torch import nn

from prime_rl.config.trainer import OptimizerConfig, SchedulerConfig


def build_optimizer(params: list[nn.Parameter], cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter 2019) over `params` (the trainable ones).

    Raises:
        ValueError: no trainable parameters (e.g. LoRA `target_modules` matching nothing).
    """
    if not params:
        raise ValueError("no trainable parameters: check model.lora.target_modules against the model's module names")
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=(cfg.betas1, cfg.betas2), eps=cfg.eps, weight_decay=cfg.weight_decay
    )


def lr_factor(step: int, cfg: SchedulerConfig, max_steps: int | None) -> float:
    """Multiplier of the base lr for optimizer step `step` (0-based: the step about to be taken).

    warmup: (step + 1) / warmup_steps for step < warmup_steps. After warmup, with progress
    p = (step - warmup) / max(1, max_steps - warmup) in [0, 1] and m = min_lr_ratio:
    constant 1; linear 1 - (1 - m) p; cosine m + (1 - m) (1 + cos(pi p)) / 2.

    Raises:
        ValueError: linear/cosine without `max_steps` (the decay needs a horizon).
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.type == "constant":
        return 1.0
    if max_steps is None:
        raise ValueError(f"scheduler.type = {cfg.type!r} needs max_steps (the decay horizon); set max_steps")
    p = min(1.0, max(0.0, (step - cfg.warmup_steps) / max(1, max_steps - cfg.warmup_steps)))
    m = cfg.min_lr_ratio
    if cfg.type == "linear":
        return 1.0 - (1.0 - m) * p
    return m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * p))


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, max_steps: int | None
) -> torch.optim.lr_scheduler.LambdaLR:
    if cfg.type != "constant" and max_steps is None:
        lr_factor(cfg.warmup_steps, cfg, max_steps)  # raises the clear error
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg, max_steps))
