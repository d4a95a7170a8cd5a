"""PNG plots of a run, from its run directory: `prime-rl plot RUN_DIR`, and at the end of every `rl` and `sft` run.

Panels (each written as `plots/<name>.png` when the run has its numbers, and together as `plots/overview.png`):

| panel | from `metrics.jsonl` (process: key) | |
|---|---|---|
| reward | orchestrator: reward (± reward_std/sqrt(num_rollouts)); eval/step_N.jsonl avg (mean ± SE over tasks) | |
| loss | trainer: loss; sft: loss | |
| entropy | trainer, sft: entropy (nats per loss token) | |
| mismatch_kl | trainer: mismatch_kl (log scale) | KL(inference || trainer) per token |
| grad_norm | trainer, sft: grad_norm (before clipping) | |
| lr | trainer, sft: lr | |
| masked | trainer: masked_frac, masked_frac_pos, masked_frac_neg; orchestrator: truncated_pct, error_pct (as fractions) | |
| off_policy | orchestrator: max_off_policy (policy versions behind) | |

A step logged twice (a resumed run) keeps its last row; missing and non-finite values are skipped. The reward axis
is fitted to the curves: a reference line (idle 0.2, greedy ...) outside their range is named in the legend
instead of stretching the axis.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prime_rl.monitor.metrics import read_metrics
from prime_rl.monitor.rundir import RunDir
from prime_rl.monitor.score_stats import mean_se

COLORS = ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:gray")
EVAL_COLORS = ("tab:red", "tab:olive", "tab:pink", "tab:cyan")  # one per eval source


@dataclass
class Line:
    """One curve of a panel: `key` of `process` rows, scaled by `scale`."""

    process: str
    key: str
    label: str
    scale: float = 1.0


@dataclass
class Panel:
    name: str
    title: str
    ylabel: str
    lines: list[Line] = field(default_factory=list)
    log: bool = False


PANELS = [
    Panel("loss", "Loss", "loss", [Line("trainer", "loss", "RL trainer"), Line("sft", "loss", "SFT (NLL per token)")]),
    Panel("entropy", "Entropy of the policy", "nats / token",
          [Line("trainer", "entropy", "RL trainer"), Line("sft", "entropy", "SFT")]),
    Panel("mismatch_kl", "Mismatch KL (inference vs trainer)", "KL / token", [Line("trainer", "mismatch_kl", "trainer")],
          log=True),
    Panel("grad_norm", "Gradient norm (before clipping)", "L2 norm",
          [Line("trainer", "grad_norm", "RL trainer"), Line("sft", "grad_norm", "SFT")]),
    Panel("lr", "Learning rate", "lr", [Line("trainer", "lr", "RL trainer"), Line("sft", "lr", "SFT")]),
    Panel("masked", "Masked and truncated fractions", "fraction", [
        Line("trainer", "masked_frac", "tokens masked (trust region)"),
        Line("trainer", "masked_frac_pos", "masked, advantage > 0"),
        Line("trainer", "masked_frac_neg", "masked, advantage < 0"),
        Line("orchestrator", "truncated_pct", "rollouts truncated", 0.01),
        Line("orchestrator", "error_pct", "rollouts masked (env errors)", 0.01),
    ]),
    Panel("off_policy", "Off-policy steps", "policy versions behind", [Line("orchestrator", "max_off_policy", "max in batch")]),
]  # fmt: skip


def series(rows: list[dict[str, Any]], key: str, scale: float = 1.0) -> list[tuple[int, float]]:
    """`(step, value * scale)` of `key` over `rows`, sorted by step; the last row of a step wins; missing and
    non-finite values are skipped."""
    by_step: dict[int, float] = {}
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            by_step[int(row["step"])] = float(value) * scale
    return sorted(by_step.items())


def train_curve(run_dir: Path, key: str = "reward") -> list[tuple[int, float]]:
    """`(step, value)` of the orchestrator's `key` per step; for a step logged twice (a resumed run) the last row
    wins."""
    return series(read_metrics(run_dir, "orchestrator"), key)


def train_reward_band(rows: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """`(step, mean reward, standard error)` of each orchestrator step: reward_std / sqrt(num_rollouts) (the
    population std over the batch's unmasked rollouts; 0 when not logged)."""
    by_step: dict[int, tuple[float, float]] = {}
    for row in rows:
        reward = row.get("reward")
        if not (isinstance(reward, int | float) and math.isfinite(reward)):
            continue
        sd, count = row.get("reward_std"), row.get("num_rollouts")
        numeric = isinstance(sd, int | float) and isinstance(count, int | float)
        se = sd / math.sqrt(count) if numeric and count > 0 else 0.0
        by_step[int(row["step"])] = (float(reward), float(se) if math.isfinite(se) else 0.0)
    return [(s, m, e) for s, (m, e) in sorted(by_step.items())]


def _eval_files(run_dir: Path) -> list[tuple[int, Path]]:
    ev = RunDir(Path(run_dir)).eval
    return sorted((int(p.stem[5:]), p) for p in ev.glob("step_*.jsonl") if p.stem[5:].isdigit()) if ev.is_dir() else []


def eval_sources(run_dir: Path) -> list[str]:
    """The eval sources named in the rows of `eval/step_N.jsonl` (their `source`), in first-seen order."""
    seen: dict[str, None] = {}
    for _, path in _eval_files(run_dir):
        for line in path.read_text().splitlines():
            if line.strip() and "source" in (row := json.loads(line)):
                seen.setdefault(str(row["source"]))
    return list(seen)


def eval_curve(run_dir: Path, source: str | None = None) -> list[tuple[int, float, float]]:
    """`(step, mean, standard error)` of the per-task `avg` in each `eval/step_N.jsonl` (only the rows of eval
    source `source` when given)."""
    out = []
    for step, path in _eval_files(run_dir):
        vals = []
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if source is not None and str(row.get("source")) != source:
                    continue
                value = row.get("avg")
                if isinstance(value, int | float) and math.isfinite(value):
                    vals.append(float(value))
        if vals:
            stats = mean_se(vals)
            out.append((step, stats.mean, stats.se))
    return out


def _pyplot() -> Any:
    from prime_rl.extras import require

    matplotlib = require("matplotlib", "plots", "plots")
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", "plots", "plots")


def _style(ax: Any, title: str, ylabel: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)


def draw_reward(ax: Any, run_dir: Path, rows: list[dict[str, Any]], references: dict[str, float] | None = None) -> bool:
    """Train reward (line, ±1 SE band) and eval reward (points, ±1 SE bars); references inside the data's range as
    dashed lines, outside it only named in the legend; one eval series per eval source when there are several.
    Returns whether anything was drawn."""
    tr = train_reward_band(rows)
    names = eval_sources(run_dir)
    evals = ([(f"eval {n} (task mean ± SE)", eval_curve(run_dir, n)) for n in names] if len(names) > 1
             else [("eval (task mean ± SE)", eval_curve(run_dir))])  # fmt: skip
    ev = [point for _, curve in evals for point in curve]
    lo, hi = math.inf, -math.inf
    if tr:
        xs, ms, es = zip(*tr, strict=True)
        ax.plot(xs, ms, "-", color="tab:blue", label="train (batch mean ± SE)")
        ax.fill_between(xs, [m - e for m, e in zip(ms, es, strict=True)], [m + e for m, e in zip(ms, es, strict=True)],
                        color="tab:blue", alpha=0.2, linewidth=0)  # fmt: skip
        lo, hi = min(lo, *(m - e for m, e in zip(ms, es, strict=True))), max(hi, *(m + e for m, e in zip(ms, es, strict=True)))
    for i, (label, curve) in enumerate(evals):
        if not curve:
            continue
        xs, ms, es = zip(*curve, strict=True)
        color = EVAL_COLORS[i % len(EVAL_COLORS)]
        ax.errorbar(xs, ms, yerr=es, fmt="o--", linewidth=1, color=color, capsize=3, label=label)
        lo, hi = min(lo, *(m - e for m, e in zip(ms, es, strict=True))), max(hi, *(m + e for m, e in zip(ms, es, strict=True)))
    if not (tr or ev):
        return False
    pad = max(0.05 * (hi - lo), 0.01)
    ax.set_ylim(lo - pad, hi + pad)
    colors = iter(COLORS[2:])
    for name, value in (references or {}).items():
        line_color = next(colors, "k")
        if lo - pad <= value <= hi + pad:
            ax.axhline(value, linestyle="--", linewidth=1, color=line_color, label=f"{name} {value:.3f}")
        else:
            side = "below" if value < lo else "above"
            ax.plot([], [], linestyle="--", linewidth=1, color=line_color,
                    label=f"{name} {value:.3f} ({side} the axis)")
    return True


def _draw(ax: Any, panel: Panel, rows_by_process: dict[str, list[dict[str, Any]]]) -> bool:
    drew = False
    colors = iter(COLORS)
    for line in panel.lines:
        pts = series(rows_by_process.get(line.process, []), line.key, line.scale)
        if panel.log:
            pts = [(s, v) for s, v in pts if v > 0]
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, "-" if len(pts) > 1 else "o", color=next(colors), label=line.label, linewidth=1.4)
        drew = True
    if drew and panel.log:
        ax.set_yscale("log")
    if drew and panel.name == "lr":  # from 0, so a constant or a decaying schedule reads at a glance
        ax.set_ylim(0, ax.get_ylim()[1] * 1.05)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    if drew and panel.name in ("off_policy",):
        from matplotlib.ticker import MaxNLocator

        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if drew and panel.name == "masked":
        ax.set_ylim(-0.03, 1.03)
    return drew


def plot_run(run_dir: Path, out_dir: Path | None = None, references: dict[str, float] | None = None) -> list[Path]:
    """Write one PNG per panel that has data (`reward.png`, `loss.png`, ...) and `overview.png` with all of them
    to `out_dir` (default `RUN_DIR/plots`). Returns the paths written (none for a run with no numbers yet).

    Raises:
        MissingExtraError: matplotlib is not installed (`pip install 'prime-rl[plots]'`).
    """
    plt = _pyplot()
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else RunDir(run_dir).plots
    rows = read_metrics(run_dir)
    by_proc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_proc.setdefault(str(row.get("process")), []).append(row)
    written: list[Path] = []
    drawn: list[str] = []
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(name: str, draw) -> None:
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        if draw(ax):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8, loc="best")
            fig.tight_layout()
            fig.savefig(out_dir / f"{name}.png")
            written.append(out_dir / f"{name}.png")
            drawn.append(name)
        plt.close(fig)

    def reward(ax: Any) -> bool:
        ok = draw_reward(ax, run_dir, by_proc.get("orchestrator", []), references)
        _style(ax, f"{run_dir.name}: reward", "reward")
        return ok

    def drawer(panel: Panel):
        def draw(ax: Any) -> bool:
            _style(ax, panel.title, panel.ylabel)
            return _draw(ax, panel, by_proc)

        return draw

    one("reward", reward)
    for panel in PANELS:
        one(panel.name, drawer(panel))
    if drawn:
        cols = 2 if len(drawn) > 1 else 1
        nrows = math.ceil(len(drawn) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 3.4 * nrows), dpi=100, squeeze=False)
        for ax, name in zip(axes.flat, drawn, strict=False):
            if name == "reward":
                reward(ax)
            else:
                drawer(next(q for q in PANELS if q.name == name))(ax)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="best")
        for ax in list(axes.flat)[len(drawn):]:
            ax.axis("off")
        fig.suptitle(f"{run_dir.name}", fontsize=12)
        fig.tight_layout()
        fig.savefig(out_dir / "overview.png")
        plt.close(fig)
        written.append(out_dir / "overview.png")
    return written


def plot_rewards(run_dir: Path, out: Path, references: dict[str, float] | None = None,
                 title: str | None = None) -> Path:  # fmt: skip
    """The reward panel alone (train and eval reward by step, references) written to `out` (PNG), titled `title`
    (default `RUN: reward by step`); a run without rewards gives the references alone as horizontal lines (empty
    axes without references either). Returns `out`."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    if not draw_reward(ax, Path(run_dir), read_metrics(Path(run_dir), "orchestrator"), references) and references:
        colors = iter(COLORS[2:])
        for name, value in references.items():
            ax.axhline(value, linestyle="--", linewidth=1, color=next(colors, "k"), label=f"{name} {value:.3f}")
        lo, hi = min(references.values()), max(references.values())
        pad = max(0.05 * (hi - lo), 0.01)
        ax.set_ylim(lo - pad, hi + pad)
    _style(ax, title or f"{Path(run_dir).name}: reward by step", "reward")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def run(cfg: Any) -> None:
    """`prime-rl plot RUN_DIR`: write the panels of the run's plots and say where.

    Raises:
        FileNotFoundError: RUN_DIR has no metrics.jsonl.
    """
    run_dir = Path(cfg.run)
    if not RunDir(run_dir).metrics.is_file():
        raise FileNotFoundError(f"{run_dir}/metrics.jsonl not found: is {run_dir} a run directory (output_dir)?")
    paths = plot_run(run_dir, cfg.out)
    if not paths:
        print(f"{run_dir}: no numbers to plot yet")
        return
    print(f"wrote {len(paths)} plots to {paths[0].parent}: " + ", ".join(p.name for p in paths))


def plot_at_end(run_dir: Path, log: Any) -> None:
    """The plots of a finished (or failed) run, for `rl` and `sft`; a missing matplotlib or an error is logged,
    never raised (the run's results are already written)."""
    try:
        paths = plot_run(run_dir)
    except Exception as e:  # plotting must not turn a finished run into a failed one
        log.warning("plots not written (%s: %s); `prime-rl plot %s` retries", type(e).__name__, e, run_dir)
        return
    if paths:
        log.info("plots in %s (%s)", paths[0].parent, ", ".join(p.name for p in paths))
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
        value = row.get(key)
        if isinstance(value, int | float) and math.isfinite(value):
            by_step[int(row["step"])] = float(value)
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
            curve = metric_curve(run_dir, process, key)
            if curve:
                ax.plot([s for s, _ in curve], [v for _, v in curve], "-", label=label)
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
