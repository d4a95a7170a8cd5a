"""Where an RL run's GridSim gain holds and where it does not: the first and last eval of one run, compared per eval
source (`gridsim`: held-out days of the training years; `gridsim-forward`: days after every training day).

Reads the run's rollout archive (`RUN/archive/step_N/eval.jsonl.gz`, written by every eval) and prints, per source:

- the paired difference last − first (per-day mean reward over the eval's rollouts, mean ± SE over days), and the
  days that gained or lost more than 0.02;
- that difference by month of the eval day, and by the first policy's score on the day (where RL helps: days the
  SFT model failed, or days it already solved);
- the share of valid schedules that charge in a night hour (HE01-HE06) for each policy, beside the optimum's share
  on the same days (`--night-hours`), for all days and for April-September and October-March. A policy far above the optimum has learned "always charge at night" as a
  clock rule instead of reading the day's prices.

    python examples/gridsim/forward_diagnosis.py outputs/demo/rl
    python examples/gridsim/forward_diagnosis.py outputs/demo/rl --forward-from 2024-01-01 --data-dir DIR

The optimum's night share needs the day's prices: they are rebuilt from GridSim's data (the packaged ERCOT days by
default, `--data-dir` for ERCOT's workbooks, `--synthetic`), so pass the `--forward-from` the run's rows used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from prime_rl.monitor.score_stats import mean_se, paired

DATE = re.compile(r"(\d{4}-\d{2})-\d{2}")
SFT_BANDS = ((0.0, 0.5), (0.5, 0.8), (0.8, 0.95), (0.95, 1.01))
SEASONS = (("all days", None), ("Apr-Sep", (4, 5, 6, 7, 8, 9)), ("Oct-Mar", (10, 11, 12, 1, 2, 3)))


def eval_steps(run: Path) -> list[int]:
    """Policy steps with an archived eval in `run`, ascending."""
    return sorted(int(p.parent.name.split("_")[1]) for p in run.glob("archive/step_*/eval.jsonl.gz"))


def read_eval(run: Path, step: int) -> list[dict]:
    """The archived eval rollouts of `step` (one record per rollout, prime_rl.orchestrator.archive's fields)."""
    with gzip.open(run / "archive" / f"step_{step}" / "eval.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def submitted_schedule(record: dict) -> list[int] | None:
    """The last `submit_schedule` call's 24 actions in a rollout record, or None when it made no valid-length call."""
    found = None
    for message in record["messages"]:
        for call in message.get("tool_calls") or []:
            args = call["function"]["arguments"]
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                continue
            schedule = args.get("schedule") if isinstance(args, dict) else None
            if isinstance(schedule, list) and len(schedule) == 24:
                found = schedule
    return found


def day_means(records: Iterable[dict], source: str) -> dict[str, float]:
    """Mean reward per task (day) of `source`'s unmasked rollouts."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record["source"] == source and not record["masked"]:
            by_task[record["task_id"]].append(float(record["reward"]))
    return {task: sum(values) / len(values) for task, values in by_task.items()}


def charges_at_night(schedule: list[int], night_hours: int) -> bool:
    """Whether the schedule buys (action 1) in any of the first `night_hours` hours."""
    return any(action == 1 for action in schedule[:night_hours])


def in_season(task_id: str, months: tuple[int, ...] | None) -> bool:
    """Whether the task's date falls in one of `months` (1-12; None = every month)."""
    match = DATE.search(task_id)
    return months is None or (match is not None and int(match.group(1)[5:7]) in months)


def night_share(records: Iterable[dict], source: str, night_hours: int, months: tuple[int, ...] | None = None) -> float:
    """Share of `source`'s valid schedules (on days in `months`) that charge in the first `night_hours` hours."""
    flags = [charges_at_night(s, night_hours) for r in records if r["source"] == source
             and in_season(r["task_id"], months) for s in [submitted_schedule(r)] if s is not None]
    return sum(flags) / len(flags) if flags else float("nan")


def optimum_night_share(
    task_ids: Iterable[str], prices: dict[str, list[float]], night_hours: int, months: tuple[int, ...] | None = None
) -> float:
    """Share of the days' optimal schedules (prime_rl.envs.gridsim.battery.optimal_schedule) that charge at night."""
    from prime_rl.envs.gridsim.battery import optimal_schedule

    flags = [charges_at_night(optimal_schedule(prices[t])[0], night_hours) for t in task_ids
             if t in prices and in_season(t, months)]
    return sum(flags) / len(flags) if flags else float("nan")


def gridsim_prices(args: argparse.Namespace) -> dict[str, list[float]]:
    """Task id -> hourly prices ($/MWh) of every eval and forward day, from the GridSim data the run used."""
    from prime_rl.envs.gridsim.env import GridSimEnv

    env = GridSimEnv(data_dir=args.data_dir, synthetic=args.synthetic, forward_from=args.forward_from)
    splits = ["eval", "forward"] if args.forward_from else ["eval"]
    return {task.task_id: list(task.info["prices"]) for split in splits for task in env.tasks(split)}


def report(run: Path, prices: dict[str, list[float]] | None, night_hours: int = 6) -> str:
    """The text the script prints for `run` (first against last archived eval)."""
    steps = eval_steps(run)
    if len(steps) < 2:
        raise SystemExit(f"forward_diagnosis: {run}/archive holds {len(steps)} eval(s); it needs a first and a last")
    first, last = steps[0], steps[-1]
    before, after = read_eval(run, first), read_eval(run, last)
    lines = [f"{run}: eval of policy {first} (first) against policy {last} (last)"]
    for source in sorted({r["source"] for r in before}):
        base, new = day_means(before, source), day_means(after, source)
        diff = paired(new, base)
        gains = {t: new[t] - base[t] for t in sorted(set(base) & set(new))}
        lines.append(f"== {source}: {len(gains)} days, last − first {diff.mean:+.4f} ± {diff.se:.4f} "
                     f"({sum(g > 0.02 for g in gains.values())} days up, {sum(g < -0.02 for g in gains.values())} down)")
        months: dict[str, list[float]] = defaultdict(list)
        for task, gain in gains.items():
            match = DATE.search(task)
            months[match.group(1) if match else "?"].append(gain)
        lines.append("   by month: " + " ".join(f"{m} {mean_se(v).mean:+.3f}" for m, v in sorted(months.items())))
        for low, high in SFT_BANDS:
            band = [gain for task, gain in gains.items() if low <= base[task] < high]
            if band:
                lines.append(f"   first policy's day score in [{low}, {min(high, 1.0)}]: {len(band)} days, "
                             f"last − first {mean_se(band).mean:+.4f}")
        for label, months in SEASONS:
            shares = (f"first {night_share(before, source, night_hours, months):.2f}, "
                      f"last {night_share(after, source, night_hours, months):.2f}")
            if prices is not None:
                shares += f", optimum {optimum_night_share(gains, prices, night_hours, months):.2f}"
            lines.append(f"   schedules charging in HE01-HE{night_hours:02d}, {label}: {shares}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an rl output_dir with an archive of two or more evals")
    parser.add_argument("--forward-from", default=None, help="the cut-off date the run's rows were written with")
    parser.add_argument("--data-dir", type=Path, default=None, help="ERCOT workbooks the run used (default: packaged)")
    parser.add_argument("--synthetic", action="store_true", help="the run used synthetic days")
    parser.add_argument("--night-hours", type=int, default=6, help="hours from HE01 that count as night")
    parser.add_argument("--no-optimum", action="store_true", help="skip the optimum's night share (no prices needed)")
    args = parser.parse_args()
    prices = None if args.no_optimum else gridsim_prices(args)
    print(report(args.run, prices, args.night_hours))


if __name__ == "__main__":
    main()
