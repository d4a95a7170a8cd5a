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



DIAGNOSTICS = (
    ("reward", [("orchestrator", "reward", "train reward"), ("orchestrator", "adv_abs_mean", "mean |advantage|")]),
    ("groups without signal (%)", [("orchestrator", "zero_spread_groups_pct", "zero-spread groups")]),
    ("d loss / d logprobs", [("trainer", "logp_grad_norm/pg", "policy-gradient term"),
                             ("trainer", "logp_grad_norm/kl", "KL term")]),
    ("KL to the starting policy (per token)", [("trainer", "kl_to_start", "kl_to_start")]),
    ("entropy (nats per token)", [("trainer", "entropy", "all loss tokens"),
                                  ("trainer", "entropy/decision", "decision tokens")]),
    ("grad norm", [("trainer", "grad_norm", "before clipping")]),
)


def metric_curve(run_dir: Path, process: str, key: str) -> list[tuple[int, float]]:
    """`(step, value)` of `key` in `process`'s metrics.jsonl rows (last row per step wins; missing/non-finite left out)."""
    by_step: dict[int, float] = {}
    for row in read_metrics(run_dir, process):
        v = row.get(key)
        if isinstance(v, int | float) and math.isfinite(v):
            by_step[int(row["step"])] = float(v)
    return sorted(by_step.items())


def plot_diagnostics(run_dir: Path, out: Path) -> Path:
    """One panel per learning diagnostic (docs/learning.md) by step: reward and mean |advantage|, zero-spread groups,
    the policy-gradient vs KL term gradient norms, KL to the starting policy, all-token vs decision-token entropy,
    grad norm. Panels whose metrics the run did not log say so. Written to `out` (PNG); returns `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), dpi=110)
    for ax, (title, series) in zip(axes.flat, DIAGNOSTICS, strict=True):
        drawn = False
        for process, key, label in series:
            c = metric_curve(run_dir, process, key)
            if c:
                ax.plot([s for s, _ in c], [v for _, v in c], "-", label=label)
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        if drawn and len(series) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(f"{Path(run_dir).name}: learning diagnostics by step", fontsize=10)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
