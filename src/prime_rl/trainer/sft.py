"""SFT (`sft @ config`): supervised fine-tuning on chat data with the RL trainer's engine.

With one dataset (`data.path`/`data.name`), step N (1-based) trains on dataset positions (N-1)*batch_size ...
N*batch_size-1 of the epoch-permuted stream (`sft_data.step_indices`); with `[[data.source]]`, each sample is
drawn from a source by weight (`sft_mix.Mixture`). The batch is packed into micro-batches of at most `seq_len`
tokens (or, with `data.shared_prefix`, grouped `micro_batch_size` at a time so their common prefix runs once) and
dealt across ranks; the loss is the NLL of the loss tokens (`data.loss_mask`: assistant tokens by default)
divided by the step's loss-token count (all ranks). `[val]` adds `val/loss` every `val.interval` steps
(`sft_val`). Same model / LoRA / FSDP2 / optimizer / checkpoint / publishing code as RL (`engine.Engine`).
Publishes `weights/step_N/` at the last step and every `publish_interval` steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Protocol

import numpy as np
import torch

from prime_rl.config.origin import where_set
from prime_rl.config.trainer import SFTConfig
from prime_rl.models.renderer import load_tokenizer, make_renderer
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.plots import plot_at_end
from prime_rl.monitor.progress import Progress, step_line
from prime_rl.trainer.dist import node_name
from prime_rl.trainer.engine import Engine, EngineConfig
from prime_rl.trainer.loss import sft_loss
from prime_rl.trainer.sft_data import (
    SFTDataError,
    SFTSample,
    load_chat_rows,
    pack_samples,
    render_dataset,
    shard_micro_batches,
    shared_prefix_micro_batches,
    step_indices,
)
from prime_rl.trainer.sft_mix import Mixture, held_out_split
from prime_rl.trainer.sft_val import validation_loss


def total_steps(cfg: SFTConfig, num_samples: int) -> int:
    """min(max_steps, steps in `data.epochs` epochs); at least one limit must be set.

    Raises:
        ValueError: neither `max_steps` nor `data.epochs` is set.
    """
    limits = []
    if cfg.max_steps is not None:
        limits.append(cfg.max_steps)
    if cfg.data.epochs is not None:
        limits.append(max(1, math.floor(cfg.data.epochs * num_samples / cfg.data.batch_size)))
    if not limits:
        raise ValueError("sft needs max_steps or data.epochs to know when to stop")
    return min(limits)


class Evaluator(Protocol):
    """Online eval of published steps (`launcher.sft_eval.OnlineEval`); used by rank 0 only."""

    def start(self, from_step: int) -> None: ...
    def due(self, step: int, last_step: int) -> bool: ...
    def score(self, step: int) -> dict[str, float]: ...
    def close(self) -> None: ...


def run(cfg: SFTConfig, evaluator: Evaluator | None = None) -> dict[str, float] | None:
    """The `sft` command: `train`, its metrics forwarded to W&B when `[wandb]` is set; returns the last step's
    metrics."""
    from prime_rl.monitor.wandb_log import run_with_wandb

    return run_with_wandb(functools.partial(train, evaluator=evaluator), cfg, "sft", {"sft"})


def _source_desc(path: Any, name: str | None, split: str, field: str) -> str:
    return f"{field}.path = {str(path)!r}" if path is not None else f"{field}.name = {name!r} (split {split})"


def load_rows(cfg: SFTConfig) -> tuple[list[str], list[list[dict]], list[float], list[dict], list[str]]:
    """(labels, train rows per source, weights, validation rows, descriptions per source) of `data` and `val`.
    One dataset (`data.path`/`data.name`) is the single source `data`; `val.fraction` holds out that share of
    each source's rows (`sft_mix.held_out_split`, seeded with `seed`)."""
    data = cfg.data
    if data.source:
        specs = [(s.resolved_label(), s, s.weight, f"data.source[{i}]") for i, s in enumerate(data.source)]
    else:
        specs = [("data", data, 1.0, "data")]
    labels, rows, weights, descs, val_rows = [], [], [], [], []
    for label, source, weight, field in specs:
        source_rows = load_chat_rows(path=source.path, name=source.name, subset=source.subset, split=source.split,
                                     columns=source.columns)
        desc = _source_desc(source.path, source.name, source.split, field)
        if cfg.val is not None and cfg.val.fraction is not None:
            train_idx, val_idx = held_out_split(len(source_rows), cfg.val.fraction, cfg.seed)
            val_rows += [source_rows[i] for i in val_idx]
            source_rows = [source_rows[i] for i in train_idx]
        labels.append(label), rows.append(source_rows), weights.append(weight), descs.append(desc)
    if cfg.val is not None and cfg.val.data is not None:
        val_data = cfg.val.data
        val_rows = load_chat_rows(path=val_data.path, name=val_data.name, subset=val_data.subset,
                                  split=val_data.split, columns=val_data.columns)
    return labels, rows, weights, val_rows, descs


def _source_probe(batch_sources: list[int], batch: list[Any], mbs: list[Any], labels: list[str]):
    """A metric probe giving `source/<label>/nll` (mean NLL per loss token of that source's samples) for packed
    micro-batches (`pack_samples` keeps samples in order, so each micro-batch is a run of consecutive samples)."""
    tok_src: dict[int, np.ndarray] = {}
    sample_idx = 0
    for mb in mbs:
        parts, filled = [], 0
        while filled < len(mb) and sample_idx < len(batch):
            parts.append(np.full(len(batch[sample_idx]), batch_sources[sample_idx]))
            filled += len(batch[sample_idx])
            sample_idx += 1
        tok_src[id(mb)] = np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def probe(fwd: Any, mb: Any) -> dict[str, tuple[float, float]]:
        src = tok_src.get(id(mb))
        lp, mask = fwd.inputs.trainer_logprobs.detach().double(), fwd.inputs.loss_mask.bool()
        out = {f"source/{lab}/nll": (0.0, 0.0) for lab in labels}
        if src is None or len(src) != lp.shape[0]:
            return out
        src_t = torch.as_tensor(src, device=lp.device)
        for label_idx, lab in enumerate(labels):
            sel = mask & (src_t == label_idx)
            out[f"source/{lab}/nll"] = (float(-lp[sel].sum()), float(sel.sum()))
        return out

    return probe


def train(cfg: SFTConfig, evaluator: Evaluator | None = None) -> dict[str, float] | None:
    """Train; returns the last step's metrics. `evaluator` (rank 0): started (with the step training resumes from)
    before the first step, `score(step)` after each step it says is `due` (the step's weights are published
    first), closed at the end.

    Raises:
        ValueError: `[eval]` is set but no evaluator was given (the `sft` command passes one).
    """
    if cfg.eval is not None and evaluator is None:
        raise ValueError("[eval] needs the inference server the sft command starts: run `sft`, or pass an evaluator "
                         "(prime_rl.launcher.sft_eval.run)")  # fmt: skip
    from prime_rl.trainer.model import model_dir

    log = setup_logging("sft", cfg.output_dir, cfg.log.level)
    model_dir(cfg.model.name)  # before the tokenizer: a missing folder or hub id fails here, naming model.name
    labels, rows, weights, val_rows, descs = load_rows(cfg)
    num_rows = sum(len(source_rows) for source_rows in rows) + (len(val_rows) if cfg.val and cfg.val.fraction else 0)
    if cfg.val is not None and (short := cfg.val.short_split_warning(len(val_rows), cfg.data.batch_size, num_rows,
                                                                     where_set)) is not None:  # fmt: skip
        log.warning(short)
    tokenizer = load_tokenizer(cfg.model.name, cfg.model.chat_template)
    renderer = make_renderer(tokenizer, cfg.renderer)
    roles = cfg.data.loss_mask.roles()
    per_source: list[list[SFTSample]] = []
    for label, source_rows, desc in zip(labels, rows, descs, strict=True):
        with Progress(f"rendering {label}", total=len(source_rows), unit="conversations", log=log) as rendering:
            samples, truncated = render_dataset(source_rows, renderer, cfg.seq_len, on_row=rendering.advance,
                                                roles=roles)
        n_loss = sum(int(s.loss_mask.sum()) for s in samples)
        log.info(
            f"{len(samples)} conversations from {desc}: {sum(len(s) for s in samples)} tokens, "
            f"{n_loss} loss tokens ({', '.join(sorted(roles))}), {truncated} truncated to seq_len={cfg.seq_len}"
        )
        if n_loss == 0:
            raise SFTDataError(f"{desc}: no loss tokens to train on after rendering (data.loss_mask: {sorted(roles)})")
        per_source.append(samples)
    val_samples: list[SFTSample] = []
    if cfg.val is not None:
        val_samples, _ = render_dataset(val_rows, renderer, cfg.seq_len, roles=roles)
        log.info(f"{len(val_samples)} validation conversations, {sum(int(s.loss_mask.sum()) for s in val_samples)} "
                 f"loss tokens")  # fmt: skip
    mixture = Mixture([len(s) for s in per_source], weights, cfg.seed, cfg.data.shuffle) if cfg.data.source else None
    n_total = sum(len(s) for s in per_source)
    steps = total_steps(cfg, n_total)
    engine = Engine(dataclasses.replace(EngineConfig.from_config(cfg), max_steps=steps), process="sft")
    pad_id = tokenizer.pad_token_id or 0
    val_bs = (cfg.val.batch_size or cfg.data.batch_size) if cfg.val is not None else 0

    def validate() -> dict[str, float]:
        return validation_loss(engine, val_samples, val_bs, cfg.val.num_batches, cfg.seq_len, pad_id)

    online = evaluator if engine.dist.is_main else None
    console = ("epoch", "val/loss")
    last = None
    try:
        engine.maybe_resume()
        if online is not None:
            online.start(engine.step)
        log.info(f"sft rank {engine.dist.rank}/{engine.dist.world_size} on {engine.dist.device}, node {node_name()}")
        if cfg.val is not None and cfg.val.eval_on_start and engine.step == 0:
            val_metrics = validate()
            if engine.dist.is_main:
                engine.metrics.log(0, val_metrics)
                log.info(step_line(0, steps, [f"Val Loss {val_metrics['val/loss']:.4f}"]))
        with Progress("sft", total=steps, unit="steps", start=engine.step, log=log, log_every_s=60.0) as bar:
            for step in range(engine.step + 1, steps + 1):
                if mixture is None:
                    picks = [(0, i) for i in step_indices(step, cfg.data.batch_size, n_total, cfg.seed,
                                                          cfg.data.shuffle)]  # fmt: skip
                else:
                    picks = mixture.step(step, cfg.data.batch_size)
                batch = [per_source[s][i] for s, i in picks]
                total = sum(int(s.loss_mask.sum()) for s in batch)
                if cfg.data.shared_prefix:
                    mbs = shared_prefix_micro_batches(batch, cfg.data.micro_batch_size, cfg.seq_len, pad_id)
                    probe = None
                else:
                    mbs = pack_samples(batch, cfg.seq_len)
                    probe = _source_probe([s for s, _ in picks], batch, mbs, labels) if mixture else None
                mbs = shard_micro_batches(mbs, engine.dist.rank, engine.dist.world_size, pad_id)
                metrics = engine.train_step(mbs, total, sft_loss, None, probe=probe)
                metrics["epoch"] = (step * cfg.data.batch_size) / n_total
                if mixture is not None:
                    counts = np.bincount([s for s, _ in picks], minlength=len(labels))
                    for source_idx, lab in enumerate(labels):
                        metrics[f"source/{lab}/samples"] = float(counts[source_idx])
                if cfg.val is not None and (step % cfg.val.interval == 0 or step == steps):
                    metrics.update(validate())
                if step == steps or (cfg.publish_interval and step % cfg.publish_interval == 0) or (
                    online is not None and online.due(step, steps)
                ):
                    engine.publish(step)
                if online is not None and online.due(step, steps):  # after publish: it scores weights/step_N
                    ev = online.score(step)
                    metrics.update(ev)
                    at_k = cfg.eval.rollouts_per_example
                    console = ("epoch", "val/loss", f"eval/avg@{at_k}", f"eval/pass@{at_k}")
                engine.maybe_checkpoint(step)
                engine.log_step(step, metrics, console=console)
                bar.advance()
                last = metrics
    finally:
        if online is not None:
            online.close()
        engine.close()
    if engine.dist.is_main:
        plot_at_end(cfg.output_dir, log)
    return last
