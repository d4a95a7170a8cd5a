"""The final eval table of a run: reference policies and models on the same eval tasks, with standard errors.

    prime-rl summary --run RUN_DIR \
        --entry idle=outputs/demo/baselines/idle.jsonl --entry greedy=... \
        --entry SFT=RUN_DIR/eval/step_0.jsonl --entry RL=RUN_DIR/eval/step_40.jsonl --entry optimum=... \
        [--compare RL:SFT --compare RL:greedy] [--out RUN_DIR/eval/summary.md] [--plot RUN_DIR/plots/reward.png]

Per-task scores are read from JSONL rows: `score` (rows of `gridsim baseline`) or `avg` (rows of the
orchestrator's `eval/step_N.jsonl`, the mean reward of a task's unmasked rollouts), keyed by `task_id`. A file
with the rows of several eval sources (which may share task ids) needs the source named: `NAME=PATH#SOURCE`.
Mean and standard error of the mean (sample std / sqrt(n)) per entry; comparisons are paired over the tasks
both entries scored: mean difference and its standard error (std of the per-task differences / sqrt(n)),
which removes the day-to-day spread both share.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from prime_rl.config.utilities import SummaryConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.monitor.plots import eval_curve, plot_rewards, train_reward_band
from prime_rl.monitor.score_stats import mean_se, paired


def load_scores(path: Path, source: str | None = None) -> dict[str, float]:
    """`{task_id: score}` from a JSONL of per-task rows (`score` or `avg`; rows without either are skipped), only
    the rows of eval source `source` when given.

    Raises:
        FileNotFoundError: no such file.
        ValueError: no row carries a score, or the rows come from several sources and none was chosen (task ids
            of different sources may collide; names the file and the sources).
    """
    out: dict[str, float] = {}
    sources: set[str] = set()
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        if "source" in row:
            sources.add(str(row["source"]))
            if source is not None and str(row["source"]) != source:
                continue
        key = str(row.get("task_id", i))
        val = row.get("score", row.get("avg"))
        if isinstance(val, int | float) and math.isfinite(val):
            out[key] = float(val)
    if source is None and len(sources) > 1:
        raise ValueError(f"{path}: rows of sources {sorted(sources)}; choose one with NAME={path}#SOURCE")
    if not out:
        which = f" of source {source!r}" if source is not None else ""
        raise ValueError(f"{path}: no row{which} has a numeric `score` or `avg`")
    return out


def table(entries: list[tuple[str, dict[str, float]]], compare: list[tuple[str, str]] = ()) -> str:
    """A markdown table (policy, tasks, mean ± SE, median, share below 0.2) and the paired comparisons."""
    lines = ["| policy | tasks | mean ± SE | median | below 0.2 |", "|---|---:|---:|---:|---:|"]
    for name, scores in entries:
        values = sorted(scores.values())
        stats = mean_se(values)
        med = (values[len(values) // 2] + values[(len(values) - 1) // 2]) / 2
        below = sum(x < 0.2 for x in values) / len(values)
        lines.append(f"| {name} | {stats.count} | {stats.fmt()} | {med:.4f} | {100 * below:.1f}% |")
    by_name = dict(entries)
    if compare:
        lines += ["", "| comparison (paired over common tasks) | tasks | mean difference ± SE | difference / SE |",
                  "|---|---:|---:|---:|"]
        for first, second in compare:
            if first not in by_name or second not in by_name:
                continue
            diff = paired(by_name[first], by_name[second])
            ratio = f"{diff.mean / diff.se:+.1f}" if diff.se > 0 else "n/a (SE 0)"
            lines.append(f"| {first} − {second} | {diff.count} | {diff.mean:+.4f} ± {diff.se:.4f} | {ratio} |")
    return "\n".join(lines) + "\n"


def run(cfg: SummaryConfig) -> None:
    """`prime-rl summary`: print the table, write it to `cfg.out` (default RUN/eval/summary.md) and, with a run
    directory, the reward plot (titled `--title` when given). A run directory without rewards (no orchestrator
    reward in metrics.jsonl, no eval/step_N.jsonl) gets a warning on stderr and a plot of the reference entries
    alone as horizontal lines, or no plot when no entry is a reference. Raises FileNotFoundError / ValueError for an
    unreadable entry file."""
    entries = []
    for entry in cfg.entry:
        name, _, path = entry.partition("=")
        path, _, source = path.partition("#")
        entries.append((name, load_scores(Path(path), source or None)))
    compare = [tuple(c.split(":", 1)) for c in cfg.compare]
    text = f"# {cfg.title}\n\n" + table(entries, compare)
    print(text)
    out = cfg.out or (cfg.run / "eval" / "summary.md" if cfg.run else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"summary written to {out}")
    if cfg.run is not None:
        ref_names = {r.lower() for r in (cfg.reference or ("idle", "greedy", "optimum", "optimal"))}
        refs = {name: mean_se(list(s.values())).mean for name, s in entries if name.lower() in ref_names}
        if not (train_reward_band(read_metrics(cfg.run, "orchestrator")) or eval_curve(cfg.run)):
            what = (f"the plot shows the reference entries ({', '.join(refs)}) alone as horizontal lines" if refs
                    else "no plot written (no entry is a reference either: --reference NAME ...)")  # fmt: skip
            print(f"warning: {cfg.run} has no run metrics (no reward in metrics.jsonl, no eval/step_N.jsonl): {what}",
                  file=sys.stderr)  # fmt: skip
            if not refs:
                return
        title = cfg.title if "title" in cfg.model_fields_set else None
        png = plot_rewards(cfg.run, cfg.plot or cfg.run / "plots" / "reward.png", references=refs, title=title)
        print(f"plot written to {png}")


if __name__ == "__main__":  # the older spelling `python -m prime_rl.monitor.summary ...`
    from prime_rl.config.loader import parse_config

    run(parse_config(SummaryConfig, prog="python -m prime_rl.monitor.summary"))
