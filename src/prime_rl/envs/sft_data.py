"""`prime-rl sft-data ENV OUT`: a built-in environment's demonstrations (`Environment.sft_examples`) as SFT JSONL.

    prime-rl sft-data reverse-text outputs/reverse-text/sft.jsonl            # the 465 train texts, reversed
    prime-rl sft-data reverse-text out.jsonl --split eval --limit 10 --args '{"seed": 1}'

Rows are `{"messages": [...], "tools": [...], "task_id", "split"}`, what `sft`'s `data.path` reads.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_sft_data(env: str, out: str | Path, split: str = "train", limit: int | None = None,
                   env_args: dict | None = None) -> int:  # fmt: skip
    """Write `load_env(env, **env_args).sft_examples(split)[:limit]` to `out` (JSONL, atomically); returns rows.

    Raises:
        KeyError: unknown environment. ValueError: it has no demonstrations, or none in that split.
    """
    from prime_rl.envs.base import load_env
    from prime_rl.transport.atomic import atomic_write_text

    environment = load_env(env, **(env_args or {}))
    if not hasattr(environment, "sft_examples"):
        raise ValueError(f"environment {env!r} has no demonstrations (sft_examples)")
    rows = environment.sft_examples(split)[:limit]
    if not rows:
        raise ValueError(f"environment {env!r} has no {split!r} demonstrations")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)


def run(cfg) -> None:
    """`prime-rl sft-data` (`prime_rl.config.utilities.SFTDataConfig`). Raises KeyError / ValueError (exit 2)."""
    num_rows = write_sft_data(cfg.env, cfg.out, cfg.split, cfg.limit, cfg.args)
    print(f"{num_rows} {cfg.split} demonstrations of {cfg.env} written to {cfg.out}")
