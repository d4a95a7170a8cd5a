"""The `gridsim` tools (`prime_rl.cli.gridsim` parses their configs): baseline scores, SFT demonstrations, a look at
one task. Imports numpy and the environment only when a tool runs."""

from __future__ import annotations

import json
from pathlib import Path

from prime_rl.config.gridsim import (
    GridSimBaselineConfig,
    GridSimDataConfig,
    GridSimDemosConfig,
    GridSimPackConfig,
    GridSimShowConfig,
)


def _env(cfg: GridSimDataConfig):
    from prime_rl.envs.gridsim.env import GridSimEnv

    return GridSimEnv(**cfg.env_args())


def baseline(cfg: GridSimBaselineConfig) -> None:
    """`gridsim baseline`: score `cfg.policy` on `cfg.split`; print the mean, write per-task scores (atomically)."""
    import numpy as np

    from prime_rl.envs.gridsim.baselines import run_baseline
    from prime_rl.transport.atomic import atomic_write_text

    rows = run_baseline(_env(cfg), cfg.policy, cfg.split, seed=cfg.seed)
    scores = np.array([r["score"] for r in rows], dtype=float)
    kind = "synthetic" if cfg.synthetic else "ercot"  # real and synthetic scores never share a file
    if cfg.forward_from is not None:  # nor the splits with and without a forward cut-off
        kind += f"-from-{cfg.forward_from.isoformat()}"
    if cfg.train_from is not None and cfg.split == "train":  # a cut train split is another set of days
        kind += f"-train-from-{cfg.train_from.isoformat()}"
    out = cfg.out or Path("outputs") / "gridsim" / f"baseline-{cfg.policy}-{cfg.split}-{kind}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in rows))
    se = scores.std(ddof=1) / np.sqrt(len(scores)) if len(scores) > 1 else float("nan")
    cut = f" forward_from {cfg.forward_from.isoformat()}" if cfg.forward_from is not None else ""
    if cfg.train_from is not None:  # the train split only (the config refuses it with another split)
        cut += f" train_from {cfg.train_from.isoformat()}"
    print(
        f"policy {cfg.policy} split {cfg.split}{cut} data {cfg.data_label()} tasks {len(rows)} "
        f"mean {scores.mean():.4f} se {se:.4f} median {np.median(scores):.4f} below_0.2 {(scores < 0.2).mean():.3f}"
    )
    print(f"per-task scores: {out}")


def sft_data(cfg: GridSimDemosConfig) -> None:
    """`gridsim sft-data OUT`: demonstrations of `cfg.split` as chat JSONL."""
    examples = _env(cfg).sft_examples(cfg.split)
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    with open(cfg.out, "w") as f:
        for ex in examples:
            f.write(json.dumps(ex, separators=(",", ":")) + "\n")
    print(f"wrote {len(examples)} {cfg.split} demonstrations to {cfg.out}")


def show(cfg: GridSimShowConfig) -> None:
    """`gridsim show`: one task's prompts and its optimal schedule."""
    env = _env(cfg)
    task = env.tasks(cfg.split)[cfg.index]
    ep = env.episode(task)
    for message in task.messages:
        print(f"--- {message['role']} ({len(message['content'].encode())} bytes)\n{message['content']}")
    print(f"--- optimal schedule (profit {ep.optimal_profit:.2f}): {ep.optimal}")


def pack_ercot(cfg: GridSimPackConfig) -> None:
    """`gridsim pack-ercot --data-dir DIR OUT`: the five hubs' prices of ERCOT's workbooks as a compact `.npz`
    (`data.save_compact`; how the packaged file is made)."""
    from prime_rl.envs.gridsim.data import HUBS, ercot_files, load_ercot, save_compact

    files = [p.name for p in ercot_files(cfg.data_dir)]
    table = load_ercot(cfg.data_dir, HUBS, use_cache=False)
    out = save_compact(table, cfg.out, source=f"ERCOT report NP4-180-ER: {', '.join(files)}; five hubs")
    print(f"wrote {len(table)} (date, hub) days ({len(table.dropped)} dropped) to {out} ({out.stat().st_size:,} bytes)")
