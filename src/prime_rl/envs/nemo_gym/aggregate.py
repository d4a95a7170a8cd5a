"""`/aggregate_metrics`: summary statistics of a batch of verify answers, in NeMo Gym's `AggregateMetrics` shape.

Follows `nemo_gym.reward_profile.compute_aggregate_metrics` (0.7) for the statistics it names the same way:
masked answers (`mask_sample: true`) are left out of every quality statistic and counted under `coverage/*`;
for `reward` and every other numeric top-level field (booleans and `_ng_*` keys excluded) it reports
`mean/`, `max/`, `min/`, `median/` and `std/` (sample standard deviation, n - 1; 0 for a single value), per task
(`group_level_metrics`, grouped by `_ng_task_index`) and over all measured rollouts (`agent_metrics`);
`key_metrics` holds the means and the coverage counts. NeMo Gym's repeat-level statistics are not computed.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

TASK_INDEX = "_ng_task_index"


def _numeric(vr: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v) for k, v in vr.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and not k.startswith("_ng_") and math.isfinite(v)
    }  # fmt: skip


def _stats(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "reward", k))
    out: dict[str, float] = {}
    for stat in ("mean", "max", "min", "median", "std"):
        for key in keys:
            xs = [r[key] for r in rows if key in r]
            if stat == "std":
                out[f"std/{key}"] = statistics.stdev(xs) if len(xs) > 1 else 0.0
            else:
                fn = {"mean": statistics.fmean, "max": max, "min": min, "median": statistics.median}[stat]
                out[f"{stat}/{key}"] = float(fn(xs))
    return out


def aggregate_metrics(verify_responses: list[dict[str, Any]]) -> dict[str, Any]:
    """`{group_level_metrics, agent_metrics, key_metrics}` of `verify_responses` (see the module docstring)."""
    if not verify_responses:
        return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}
    scored = [vr for vr in verify_responses if not vr.get("mask_sample")]
    tasks_all = {vr.get(TASK_INDEX, 0) for vr in verify_responses}
    tasks_scored = {vr.get(TASK_INDEX, 0) for vr in scored}
    coverage = {
        "coverage/measured_rollouts": len(scored),
        "coverage/masked_rollouts": len(verify_responses) - len(scored),
        "coverage/measured_tasks": len(tasks_scored),
        "coverage/fully_masked_tasks": len(tasks_all - tasks_scored),
    }
    if not scored:
        return {"group_level_metrics": [], "agent_metrics": dict(coverage), "key_metrics": dict(coverage)}
    groups: dict[Any, list[dict[str, float]]] = {}
    for vr in scored:
        groups.setdefault(vr.get(TASK_INDEX, 0), []).append(_numeric(vr))
    group_level = [
        {TASK_INDEX: t, **_stats(rows), "num_rollouts": len(rows)} for t, rows in sorted(groups.items(), key=lambda x: str(x[0]))
    ]
    agent = {**_stats([_numeric(vr) for vr in scored]), **coverage}
    key = {k: v for k, v in agent.items() if k.startswith("mean/") or k.startswith("coverage/")}
    return {"group_level_metrics": group_level, "agent_metrics": agent, "key_metrics": key}
