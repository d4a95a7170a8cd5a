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
    optimizer = torch.optim.AdamW(
        params, lr=cfg.lr, betas=(cfg.betas1, cfg.betas2), eps=cfg.eps, weight_decay=cfg.weight_decay
    )
    init_adamw_state(optimizer)
    return optimizer


def init_adamw_state(optimizer: torch.optim.Optimizer) -> None:
    """Create now, for every parameter that has none, the AdamW state torch creates lazily at its first step (as in
    `torch.optim.Adam._init_group`): `step` 0, `exp_avg` and `exp_avg_sq` (and `max_exp_avg_sq` with amsgrad) zeros
    shaped like the parameter (a DTensor under FSDP2). The next `step()` then computes exactly what it would have
    with lazy initialisation (tests/trainer/test_trainer.py checks this bit for bit).

    Why: a checkpoint taken before any update (every step so far skipped: no loss token, no learning signal) would
    otherwise hold an empty optimizer state, and loading it fails ("Missing key ... optim.state...step"), because
    torch.distributed.checkpoint's `get_state_dict` fills a fresh optimizer's state before loading into it.
    """
    from torch.optim.optimizer import _get_scalar_dtype

    for group in optimizer.param_groups:
        for param in group["params"]:
            if optimizer.state.get(param):
                continue
            fused, capturable = bool(group.get("fused")), bool(group.get("capturable"))
            st: dict[str, torch.Tensor] = {}
            if fused or capturable:
                st["step"] = torch.zeros((), dtype=_get_scalar_dtype(is_fused=fused), device=param.device)
            else:
                st["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype(), device="cpu")
            for key in ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group.get("amsgrad") else ()):
                st[key] = torch.zeros_like(param, memory_format=torch.preserve_format)
            optimizer.state[param] = st


def lr_factor(step: int, cfg: SchedulerConfig, max_steps: int | None) -> float:
    """Multiplier of the base lr for optimizer step `step` (0-based: the step about to be taken).

    warmup: (step + 1) / warmup_steps for step < warmup_steps. After warmup, with progress
    p = (step - warmup) / max(1, max_steps - warmup) in [0, 1] (`progress`) and m = min_lr_ratio (`min_ratio`):
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
    progress = min(1.0, max(0.0, (step - cfg.warmup_steps) / max(1, max_steps - cfg.warmup_steps)))
    min_ratio = cfg.min_lr_ratio
    if cfg.type == "linear":
        return 1.0 - (1.0 - min_ratio) * progress
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, max_steps: int | None
) -> torch.optim.lr_scheduler.LambdaLR:
    if cfg.type != "constant" and max_steps is None:
        lr_factor(cfg.warmup_steps, cfg, max_steps)  # raises the clear error
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg, max_steps))
