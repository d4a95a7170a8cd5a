"""One line per GridSim RL run of examples/gridsim/experiments.sh: SFT (step 0) and RL (last step) eval, RL - SFT
paired over the eval days, RL - pooled SFT (the mean of every run's step-0 eval of the same SFT model, a lower-noise
baseline), the argmax scores when present, and the diagnostics that show where learning stalls.

    python examples/gridsim/exp_table.py outputs/gridsim-exp          # every RUN/rl below the folder
    python examples/gridsim/exp_table.py outputs/gridsim-exp --md     # as a markdown table
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from prime_rl.monitor.metrics import read_metrics
from prime_rl.monitor.score_stats import mean_se, paired
from prime_rl.monitor.summary import load_scores


def eval_steps(run: Path) -> dict[int, Path]:
    return {int(p.stem.split("_")[1]): p for p in (run / "eval").glob("step_*.jsonl")}


def avg(rows: list[dict], key: str, sl: slice) -> float | None:
    v = [r[key] for r in rows if r.get(key) is not None][sl]
    return statistics.fmean(v) if v else None


def run_line(run: Path, pooled: dict[str, float]) -> dict | None:
    steps = eval_steps(run)
    if len(steps) < 2:
        return None
    first, last = min(steps), max(steps)
    sft, rl = load_scores(steps[first]), load_scores(steps[last])
    orch, tr = read_metrics(run, "orchestrator"), read_metrics(run, "trainer")
    d, dp = paired(rl, sft), paired(rl, pooled)
    out = {"run": run.parent.name if run.name == "rl" else run.name, "steps": last,
           "sft": mean_se(list(sft.values())).mean, "rl": mean_se(list(rl.values())).mean,
           "diff": d.mean, "se": d.se, "diff_pooled": dp.mean, "se_pooled": dp.se,
           "reward_first10": avg(orch, "reward", slice(0, 10)), "reward_last10": avg(orch, "reward", slice(-10, None)),
           "adv_abs": avg(orch, "adv_abs_mean", slice(None)), "zero_spread": avg(orch, "zero_spread_groups_pct", slice(None)),
           "kl_to_start": avg(tr, "kl_to_start", slice(-5, None)), "ent_dec": avg(tr, "entropy/decision", slice(None)),
           "pg": avg(tr, "logp_grad_norm/pg", slice(None)), "kl": avg(tr, "logp_grad_norm/kl", slice(None))}  # fmt: skip
    for name in ("argmax_sft", "argmax_rl"):
        p = run / "argmax" / f"{name}.jsonl"
        if p.exists():
            out[name] = mean_se(list(load_scores(p).values())).mean
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root", type=Path)
    p.add_argument("--md", action="store_true")
    a = p.parse_args()
    runs = sorted({q.parent.parent for q in a.root.glob("**/rl/eval/step_*.jsonl")})
    firsts = [load_scores(eval_steps(r)[min(eval_steps(r))]) for r in runs if len(eval_steps(r)) >= 2]
    days = sorted(set.intersection(*(set(f) for f in firsts))) if firsts else []
    pooled = {t: statistics.fmean(f[t] for f in firsts) for t in days}
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    if a.md:
        print("| run | SFT | RL | RL − SFT (paired) | RL − pooled SFT | train reward first/last 10 | mean abs adv | "
              "zero-spread % | KL to start (last 5) | decision entropy | pg / kl grad |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        line = run_line(r, pooled)
        if line is None:
            continue
        if a.md:
            print(f"| {line['run']} | {line['sft']:.4f} | {line['rl']:.4f} | {line['diff']:+.4f} ± {line['se']:.4f} "
                  f"({line['diff'] / line['se']:+.1f} SE) | {line['diff_pooled']:+.4f} ± {line['se_pooled']:.4f} | "
                  f"{fmt(line['reward_first10'])} / {fmt(line['reward_last10'])} | {fmt(line['adv_abs'])} | "
                  f"{fmt(line['zero_spread'])} | {fmt(line['kl_to_start'])} | {fmt(line['ent_dec'])} | "
                  f"{fmt(line['pg'])} / {fmt(line['kl'])} |")  # fmt: skip
        else:
            print(json.dumps(line))
    if firsts:
        print(f"pooled SFT over {len(firsts)} step-0 evals: {mean_se(list(pooled.values())).fmt()}")


if __name__ == "__main__":
    main()
