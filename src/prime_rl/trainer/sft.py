"""SFT (`sft @ config`): supervised fine-tuning on chat JSONL with the RL trainer's engine.

Step N (1-based) trains on dataset positions (N-1)*batch_size ... N*batch_size-1 of the epoch-permuted stream
(`sft_data.step_indices`), packed into micro-batches of at most `seq_len` tokens (or, with `data.shared_prefix`,
grouped `micro_batch_size` at a time so their common prefix runs once) and dealt across ranks; the loss is the
NLL of assistant tokens divided by the step's assistant-token count (all ranks). Same model / LoRA / FSDP2 /
optimizer / checkpoint / publishing code as RL (`engine.Engine`). Publishes `weights/step_N/` at the last step
and every `publish_interval` steps.
"""

from __future__ import annotations

import dataclasses
import math

from prime_rl.config.trainer import SFTConfig
from prime_rl.models.renderer import load_tokenizer, make_renderer
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.plots import plot_at_end
from prime_rl.monitor.progress import Progress
from prime_rl.trainer.dist import node_name
from prime_rl.trainer.engine import Engine, EngineConfig
from prime_rl.trainer.loss import sft_loss
from prime_rl.trainer.sft_data import (
    load_chat_rows,
    pack_samples,
    render_dataset,
    shard_micro_batches,
    shared_prefix_micro_batches,
    step_indices,
)


def total_steps(cfg: SFTConfig, n: int) -> int:
    """min(max_steps, steps in `data.epochs` epochs); at least one limit must be set.

    Raises:
        ValueError: neither `max_steps` nor `data.epochs` is set.
    """
    limits = []
    if cfg.max_steps is not None:
        limits.append(cfg.max_steps)
    if cfg.data.epochs is not None:
        limits.append(max(1, math.floor(cfg.data.epochs * n / cfg.data.batch_size)))
    if not limits:
        raise ValueError("sft needs max_steps or data.epochs to know when to stop")
    return min(limits)


def run(cfg: SFTConfig) -> dict[str, float] | None:
    """The `sft` command: `train`, its metrics forwarded to W&B when `[wandb]` is set; returns the last step's
    metrics."""
    from prime_rl.monitor.wandb_log import run_with_wandb

    return run_with_wandb(train, cfg, "sft", {"sft"})


def train(cfg: SFTConfig) -> dict[str, float] | None:
    """Train; returns the last step's metrics."""
    from prime_rl.trainer.model import model_dir

    log = setup_logging("sft", cfg.output_dir, cfg.log.level)
    model_dir(cfg.model.name)  # before the tokenizer: a missing folder or hub id fails here, naming model.name
    d = cfg.data
    rows = load_chat_rows(path=d.path, name=d.name, subset=d.subset, split=d.split, columns=d.columns)
    source = f"data.path = {str(d.path)!r}" if d.path is not None else f"data.name = {d.name!r} (split {d.split})"
    tokenizer = load_tokenizer(cfg.model.name, cfg.model.chat_template)
    renderer = make_renderer(tokenizer, cfg.renderer)
    with Progress("rendering", total=len(rows), unit="conversations", log=log) as p:
        samples, truncated = render_dataset(rows, renderer, cfg.seq_len, on_row=p.advance)
    n_loss = sum(int(s.loss_mask.sum()) for s in samples)
    log.info(
        f"{len(samples)} conversations from {source}: {sum(len(s) for s in samples)} tokens, "
        f"{n_loss} assistant tokens, {truncated} truncated to seq_len={cfg.seq_len}"
    )
    if n_loss == 0:
        raise ValueError(f"{source}: no assistant tokens to train on after rendering")
    steps = total_steps(cfg, len(samples))
    engine = Engine(dataclasses.replace(EngineConfig.from_config(cfg), max_steps=steps), process="sft")
    pad_id = tokenizer.pad_token_id or 0
    last = None
    try:
        engine.maybe_resume()
        log.info(f"sft rank {engine.dist.rank}/{engine.dist.world_size} on {engine.dist.device}, node {node_name()}")
        with Progress("sft", total=steps, unit="steps", start=engine.step, log=log, log_every_s=60.0) as bar:
            for step in range(engine.step + 1, steps + 1):
                idx = step_indices(step, cfg.data.batch_size, len(samples), cfg.seed, cfg.data.shuffle)
                batch = [samples[i] for i in idx]
                total = sum(int(s.loss_mask.sum()) for s in batch)
                if cfg.data.shared_prefix:
                    mbs = shared_prefix_micro_batches(batch, cfg.data.micro_batch_size, cfg.seq_len, pad_id)
                else:
                    mbs = pack_samples(batch, cfg.seq_len)
                mbs = shard_micro_batches(mbs, engine.dist.rank, engine.dist.world_size, pad_id)
                m = engine.train_step(mbs, total, sft_loss, None)
                m["epoch"] = (step * cfg.data.batch_size) / len(samples)
                if step == steps or (cfg.publish_interval and step % cfg.publish_interval == 0):
                    engine.publish(step)
                engine.maybe_checkpoint(step)
                engine.log_step(step, m, console=("epoch",))
                bar.advance()
                last = m
    finally:
        engine.close()
    if engine.dist.is_main:
        plot_at_end(cfg.output_dir, log)
    return last
