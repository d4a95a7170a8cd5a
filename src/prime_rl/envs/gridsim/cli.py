"""`gridsim` subcommands: baseline scores, SFT demonstrations, a look at one task. Imports only numpy lazily."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _num_train(text: str) -> int | None:
    if text == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--num-train {text!r}: give a positive integer or `all`")
    return n


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir", type=Path, default=None, help="folder of ERCOT DAMLZHBSPP_<year>.xlsx (default: synthetic days)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the split draw (default 0)")
    p.add_argument(
        "--num-train",
        type=_num_train,
        default=2000,
        help="train split size, or `all` for every usable day off the eval dates (default 2000; eval is always 200)",
    )


def _env(args: argparse.Namespace):
    from prime_rl.envs.gridsim.env import GridSimEnv

    return GridSimEnv(data_dir=args.data_dir, seed=args.seed, num_train=args.num_train)


def _baseline(args: argparse.Namespace) -> int:
    import numpy as np

    from prime_rl.envs.gridsim.baselines import run_baseline
    from prime_rl.transport.atomic import atomic_write_text

    rows = run_baseline(_env(args), args.policy, args.split, seed=args.seed)
    scores = np.array([r["score"] for r in rows], dtype=float)
    kind = "synthetic" if args.data_dir is None else "ercot"  # real and synthetic scores never share a file
    out = args.out or Path("outputs") / "gridsim" / f"baseline-{args.policy}-{args.split}-{kind}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in rows))
    source = args.data_dir or "synthetic"
    print(
        f"policy {args.policy} split {args.split} data {source} tasks {len(rows)} "
        f"mean {scores.mean():.4f} median {np.median(scores):.4f} below_0.2 {(scores < 0.2).mean():.3f}"
    )
    print(f"per-task scores: {out}")
    return 0


def _sft_data(args: argparse.Namespace) -> int:
    examples = _env(args).sft_examples(args.split)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for ex in examples:
            f.write(json.dumps(ex, separators=(",", ":")) + "\n")
    print(f"wrote {len(examples)} {args.split} demonstrations to {args.out}")
    return 0


def _show(args: argparse.Namespace) -> int:
    env = _env(args)
    task = env.tasks(args.split)[args.index]
    ep = env.episode(task)
    for m in task.messages:
        print(f"--- {m['role']} ({len(m['content'].encode())} bytes)\n{m['content']}")
    print(f"--- optimal schedule (profit {ep.optimal_profit:.2f}): {ep.optimal}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gridsim", description="GridSim: one grid battery on one day of ERCOT prices."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("baseline", help="score a reference policy on a split; print the mean, write per-task scores")
    b.add_argument("--policy", choices=["idle", "greedy", "optimal", "random"], default="greedy")
    b.add_argument("--split", choices=["train", "eval"], default="eval")
    b.add_argument(
        "--out",
        type=Path,
        default=None,
        help="per-task scores JSONL (default outputs/gridsim/baseline-POLICY-SPLIT-{synthetic|ercot}.jsonl)",
    )
    _add_data_args(b)
    b.set_defaults(fn=_baseline)
    s = sub.add_parser("sft-data", help="write demonstrations (optimal submit_schedule calls) as chat JSONL")
    s.add_argument("--split", choices=["train", "eval"], default="train")
    s.add_argument("out", type=Path, help="output JSONL")
    _add_data_args(s)
    s.set_defaults(fn=_sft_data)
    w = sub.add_parser("show", help="print one task's prompts and optimal schedule")
    w.add_argument("--split", choices=["train", "eval"], default="eval")
    w.add_argument("--index", type=int, default=0)
    _add_data_args(w)
    w.set_defaults(fn=_show)
    return parser


def main(argv: list[str] | None = None) -> None:
    from prime_rl.envs._cli import run_subcommand

    run_subcommand(build_parser(), argv)
