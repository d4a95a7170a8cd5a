"""RL -> export -> SFT -> eval on the digit bandit (docs/monitoring.md, "Rollout archive"): the rejection-sampling
loop. One RL run of examples/ladder/digit.toml from the random tiny model; `prime-rl export-sft` keeps its rollouts
with reward >= 1 (the target digit; `min_step` on, top-k per task, deduplicated); `sft @ examples/ladder/digit_sft.toml`
trains the same start model on them; `evals --backend transformers` scores the start model, the RL policy and the
SFT model on the same 16 eval tasks x 8 rollouts (temperature 1), mean ± SE over the tasks.

    python -m tests.learning.export_loop --seeds 0 1 2 --out outputs/export-loop

prints one line per seed and writes `export_loop.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from tests.learning.ladder import LADDER, _run, digit

EVAL_SOURCE = json.dumps([{"name": "digit", "env": {"id": "digit-bandit", "agent": {"max_turns": 1}}}])


def task_mean_se(eval_file: Path) -> tuple[float, float, int]:
    """Mean and standard error over tasks of the per-task mean reward (`evals`' `<output_dir>/<model>/step_0.jsonl`), and the task
    count."""
    means = [sum(r["rewards"]) / len(r["rewards"]) for r in map(json.loads, eval_file.read_text().splitlines())]
    n = len(means)
    mean = sum(means) / n
    sd = math.sqrt(sum((m - mean) ** 2 for m in means) / (n - 1)) if n > 1 else 0.0
    return mean, sd / math.sqrt(n), n


def evaluate(model: Path, out: Path, seed: int) -> tuple[float, float, int]:
    """`evals` of `model` in-process (transformers) on the digit bandit's eval split, k = 8, temperature 1."""
    _run(["evals", "--model.name", str(model), "--backend", "transformers", "--eval.source", EVAL_SOURCE,
          "--eval.rollouts-per-example", "8", "--eval.sampling.temperature", "1.0",
          "--eval.sampling.max-completion-tokens", "2", "--seq-len", "256", "--seed", str(seed),
          "--output-dir", str(out)], out.parent / f"{out.name}.log", 600)  # fmt: skip
    return task_mean_se(next(out.glob("*/step_0.jsonl")))  # output_dir/<model key>/step_0.jsonl


def loop(out: Path, seed: int, min_step: int = 20, top_k: int = 4, rl_args: list[str] = ()) -> dict[str, Any]:
    """One seed of the loop under `out`; returns the three evals (mean, SE, tasks), export size and the RL run."""
    from prime_rl.models.tiny import cached_tiny_model

    start = cached_tiny_model(hidden=64, layers=2, seed=0)
    rl = digit(out, seed, list(rl_args))
    run = out / f"digit-s{seed}"
    data = out / f"export-s{seed}.jsonl"
    _run(["prime-rl", "export-sft", str(run), str(data), "--min-reward", "1", "--min-step", str(min_step),
          "--top-k", str(top_k)], out / f"export-s{seed}.log", 120)  # fmt: skip
    rows = len(data.read_text().splitlines())
    sft = out / f"sft-s{seed}"
    _run(["sft", "@", str(LADDER / "digit_sft.toml"), "--model.name", str(start), "--data.path", str(data),
          "--output-dir", str(sft), "--seed", str(seed)], out / f"sft-s{seed}.log", 900)  # fmt: skip
    sft_model = sorted((sft / "weights").glob("step_*/STABLE"))[-1].parent
    rl_model = sorted((run / "weights").glob("step_*/STABLE"), key=lambda p: int(p.parent.name[5:]))[-1].parent
    return {
        "seed": seed, "export_rows": rows, "rl_wall_s": rl["wall_s"], "rl_orchestrator_eval": rl["eval"],
        "start": evaluate(start, out / f"eval-start-s{seed}", seed),
        "rl": evaluate(rl_model, out / f"eval-rl-s{seed}", seed),
        "sft": evaluate(sft_model, out / f"eval-sft-s{seed}", seed),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="RL -> export-sft -> SFT -> eval on the digit bandit, per seed.")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=Path("outputs") / "export-loop")
    a = p.parse_args(argv)
    results = []
    for s in a.seeds:
        r = loop(a.out, s)
        results.append(r)
        print(" | ".join([f"seed {s}", f"export {r['export_rows']} rows"]
                         + [f"{k} {r[k][0]:.3f} ± {r[k][1]:.3f}" for k in ("start", "rl", "sft")]), flush=True)  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "export_loop.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
