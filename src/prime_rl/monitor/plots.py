"""PNG plots of a run: train reward (metrics.jsonl, orchestrator rows) and eval reward (eval/step_N.jsonl) by step."""

from __future__ import annotations

import json
import math
from pathlib import Path

from prime_rl.monitor.metrics import read_metrics
from prime_rl.monitor.rundir import RunDir
from prime_rl.monitor.stats import mean_se


def train_curve(run_dir: Path, key: str = "reward") -> list[tuple[int, float]]:
    """`(step, value)` of the orchestrator's `key` per step; for a step logged twice (a resumed run) the last row
    wins."""
    by_step: dict[int, float] = {}
    for row in read_metrics(run_dir, "orchestrator"):
        v = row.get(key)
        if isinstance(v, int | float) and math.isfinite(v):
            by_step[int(row["step"])] = float(v)
    return sorted(by_step.items())


def eval_curve(run_dir: Path) -> list[tuple[int, float, float]]:
    """`(step, mean, standard error)` of the per-task `avg` in each `eval/step_N.jsonl`."""
    out = []
    ev = RunDir(Path(run_dir)).eval
    files = sorted((int(p.stem[5:]), p) for p in ev.glob("step_*.jsonl") if p.stem[5:].isdigit()) if ev.is_dir() else []
    for n, p in files:
        vals = []
        for line in p.read_text().splitlines():
            if line.strip():
                v = json.loads(line).get("avg")
                if isinstance(v, int | float) and math.isfinite(v):
                    vals.append(float(v))
        if vals:
            s = mean_se(vals)
            out.append((n, s.mean, s.se))
    return out


def plot_rewards(run_dir: Path, out: Path, references: dict[str, float] | None = None) -> Path:
    """Train reward by step (line) and eval reward by step (points with ±1 SE bars), with horizontal reference
    lines (e.g. {"greedy": 0.81}); written to `out` (PNG). Returns `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tr = train_curve(run_dir)
    ev = eval_curve(run_dir)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    if tr:
        ax.plot([s for s, _ in tr], [v for _, v in tr], "-", color="tab:blue", alpha=0.8, label="train reward (batch mean)")
    if ev:
        ax.errorbar([s for s, _, _ in ev], [m for _, m, _ in ev], yerr=[e for _, _, e in ev], fmt="o-",
                    color="tab:red", capsize=3, label="eval reward (mean ± SE)")
    colors = iter(["tab:gray", "tab:green", "tab:purple", "tab:orange", "tab:brown"])
    for name, v in (references or {}).items():
        ax.axhline(v, linestyle="--", linewidth=1, color=next(colors, "k"), label=f"{name} {v:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(f"{Path(run_dir).name}: reward by step")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out

