"""Per-step numbers of the orchestrator: metrics.jsonl rows and the console step line."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from prime_rl.monitor.progress import format_duration
from prime_rl.monitor.progress import step_line as progress_step_line
from prime_rl.orchestrator.admission import CutBatch


def step_metrics(batch: CutBatch, step_time_s: float, policy_version: int) -> dict[str, Any]:
    """Metrics of one step's rollouts.

    reward: mean over unmasked rollouts; trainable: rollouts that carry loss (unmasked, not filtered, sampled
    tokens, nonzero advantage); turns: mean model turns; error_pct: masked rollouts; truncated_pct: rollouts cut by
    a token budget; max_off_policy: (N - 1) - oldest policy version in the batch; adv_abs_mean: mean |advantage|
    over unmasked rollouts; zero_spread_groups_pct: groups whose advantages are all zero (no learning signal).
    """
    rs = batch.rollouts
    n = len(rs)
    ok = [r for r in rs if not r.masked]
    trainable = sum(r.trainable for r in rs)
    m: dict[str, Any] = {
        "reward": sum(r.reward for r in ok) / len(ok) if ok else float("nan"),
        "reward_std": _std([r.reward for r in ok]),
        "adv_abs_mean": sum(abs(r.advantage) for r in ok) / len(ok) if ok else 0.0,
        "zero_spread_groups_pct": _zero_spread_pct(rs),
        "num_rollouts": n,
        "trainable": trainable,
        "trainable_pct": 100.0 * trainable / n if n else 0.0,
        "turns": sum(r.num_turns for r in rs) / n if n else 0.0,
        "max_off_policy": batch.max_off_policy,
        "error_pct": 100.0 * (n - len(ok)) / n if n else 0.0,
        "truncated_pct": 100.0 * sum(r.truncated for r in rs) / n if n else 0.0,
        "turn_capped_pct": 100.0 * sum(r.turn_capped for r in rs) / n if n else 0.0,
        "prefix_breaks": sum(r.prefix_breaks for r in rs),
        "malformed_tool_calls": sum(r.malformed_tool_calls for r in rs),
        "dropped_stale_groups": batch.dropped_stale_groups,
        "filtered_groups": batch.filtered_groups,
        "seq_len_mean": sum(r.num_tokens for r in rs) / n if n else 0.0,
        "loss_tokens": sum(r.num_loss_tokens for r in rs if not r.masked and not r.filtered),
        "rollout_time_s_mean": sum(r.duration_s for r in rs) / n if n else 0.0,
        "step_time_s": step_time_s,
        "wait_s": batch.wait_s,
        "policy_version": policy_version,
    }
    errors: dict[str, int] = defaultdict(int)
    for r in rs:
        if r.masked:
            errors[r.error_kind or "unknown"] += 1
    for k, v in errors.items():
        m[f"errors/{k}"] = v
    by_src: dict[str, list] = defaultdict(list)
    env_m: dict[str, list] = defaultdict(list)
    for r in ok:
        by_src[r.source].append(r.reward)
        for k, v in r.env_metrics.items():
            if isinstance(v, int | float):
                env_m[k].append(float(v))
    if len(by_src) > 1:
        for s, v in by_src.items():
            m[f"reward/{s}"] = sum(v) / len(v)
    for k, v in env_m.items():
        m[f"env/{k}"] = sum(v) / len(v)
    return m


def step_line(step: int, m: dict[str, Any], max_steps: int | None = None) -> str:
    """`Step 12/50 | 1m 23s | Reward 0.7508 | Trainable 32/32 (100.0%) | Turns 3.9 | Max Off-Policy 1 | Error 0.0% |
    Truncated 12.5%` (`Step 12 | ...` without `max_steps`)."""
    reward = m["reward"]
    rtxt = "nan" if reward is None or (isinstance(reward, float) and math.isnan(reward)) else _number(reward)
    return progress_step_line(step, max_steps, [
        format_duration(m["step_time_s"]), f"Reward {rtxt}",
        f"Trainable {m['trainable']}/{m['num_rollouts']} ({m['trainable_pct']:.1f}%)", f"Turns {m['turns']:.1f}",
        f"Max Off-Policy {m['max_off_policy']}", f"Error {m['error_pct']:.1f}%", f"Truncated {m['truncated_pct']:.1f}%",
    ])  # fmt: skip


def _number(x: float) -> str:
    """4 decimals for the usual rewards, 4 significant digits in exponent form from 1e4 on (`1.235e+05`)."""
    return f"{x:.4f}" if abs(x) < 1e4 else f"{x:.4g}"


def _zero_spread_pct(rollouts: list) -> float:
    """Share (%) of the batch's groups in which every rollout's advantage is 0 (equal rewards, or < 2 unmasked)."""
    groups: dict[int, bool] = {}
    for r in rollouts:
        groups[r.group_id] = groups.get(r.group_id, True) and r.advantage == 0.0
    return 100.0 * sum(groups.values()) / len(groups) if groups else 0.0


def _std(v: list[float]) -> float:
    if len(v) < 2:
        return 0.0
    mu = sum(v) / len(v)
    return math.sqrt(sum((x - mu) ** 2 for x in v) / len(v))
