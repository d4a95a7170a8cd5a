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
    a token budget; max_off_policy: (N - 1) - oldest policy version among the rollouts trained on (not masked, not
    filtered; `admission.max_trained_off_policy`); adv_abs_mean: mean |advantage| over unmasked rollouts;
    zero_spread_groups_pct: groups whose advantages are all zero (no learning signal);
    worker_rollouts/<i>: the step's rollouts played by rollout worker i (only with orchestrator.workers.count > 0).
    """
    rollouts = batch.rollouts
    count = len(rollouts)
    ok = [ro for ro in rollouts if not ro.masked]
    trainable = sum(ro.trainable for ro in rollouts)

    def share(total: float) -> float:  # percent of the step's rollouts
        return 100.0 * total / count if count else 0.0

    def mean(total: float) -> float:  # per rollout of the step
        return total / count if count else 0.0

    metrics: dict[str, Any] = {
        "reward": sum(ro.reward for ro in ok) / len(ok) if ok else float("nan"),
        "reward_std": _std([ro.reward for ro in ok]),
        "adv_abs_mean": sum(abs(ro.advantage) for ro in ok) / len(ok) if ok else 0.0,
        "zero_spread_groups_pct": _zero_spread_pct(rollouts),
        "num_rollouts": count,
        "trainable": trainable,
        "trainable_pct": share(trainable),
        "turns": mean(sum(ro.num_turns for ro in rollouts)),
        "max_off_policy": batch.max_off_policy,
        "error_pct": share(count - len(ok)),
        "truncated_pct": share(sum(ro.truncated for ro in rollouts)),
        "turn_capped_pct": share(sum(ro.turn_capped for ro in rollouts)),
        "prefix_breaks": sum(ro.prefix_breaks for ro in rollouts),
        "malformed_tool_calls": sum(ro.malformed_tool_calls for ro in rollouts),
        "dropped_stale_groups": batch.dropped_stale_groups,
        "filtered_groups": batch.filtered_groups,
        "seq_len_mean": mean(sum(ro.num_tokens for ro in rollouts)),
        "loss_tokens": sum(ro.num_loss_tokens for ro in rollouts if not ro.masked and not ro.filtered),
        "rollout_time_s_mean": mean(sum(ro.duration_s for ro in rollouts)),
        "step_time_s": step_time_s,
        "wait_s": batch.wait_s,
        "policy_version": policy_version,
    }
    errors: dict[str, int] = defaultdict(int)
    for rollout in rollouts:
        if rollout.masked:
            errors[rollout.error_kind or "unknown"] += 1
    for kind, num in errors.items():
        metrics[f"errors/{kind}"] = num
    played: dict[int, int] = defaultdict(int)
    for rollout in rollouts:
        if rollout.worker is not None:
            played[rollout.worker] += 1
    for worker in sorted(played):
        metrics[f"worker_rollouts/{worker}"] = played[worker]
    by_source: dict[str, list] = defaultdict(list)
    env_metrics: dict[str, list] = defaultdict(list)
    for rollout in ok:
        by_source[rollout.source].append(rollout.reward)
        for name, value in rollout.env_metrics.items():
            if isinstance(value, int | float):
                env_metrics[name].append(float(value))
    if len(by_source) > 1:
        for source, rewards in by_source.items():
            metrics[f"reward/{source}"] = sum(rewards) / len(rewards)
    for name, values in env_metrics.items():
        metrics[f"env/{name}"] = sum(values) / len(values)
    return metrics


def step_line(step: int, metrics: dict[str, Any], max_steps: int | None = None) -> str:
    """`Step 12/50 | 1m 23s | Reward 0.7508 | Trainable 32/32 (100.0%) | Turns 3.9 | Max Off-Policy 1 | Error 0.0% |
    Truncated 12.5%` (`Step 12 | ...` without `max_steps`)."""
    reward = metrics["reward"]
    rtxt = "nan" if reward is None or (isinstance(reward, float) and math.isnan(reward)) else _number(reward)
    return progress_step_line(step, max_steps, [
        format_duration(metrics["step_time_s"]), f"Reward {rtxt}",
        f"Trainable {metrics['trainable']}/{metrics['num_rollouts']} ({metrics['trainable_pct']:.1f}%)",
        f"Turns {metrics['turns']:.1f}", f"Max Off-Policy {metrics['max_off_policy']}",
        f"Error {metrics['error_pct']:.1f}%", f"Truncated {metrics['truncated_pct']:.1f}%",
    ])  # fmt: skip


def _number(value: float) -> str:
    """4 decimals for the usual rewards, 4 significant digits in exponent form from 1e4 on (`1.235e+05`)."""
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"


def _zero_spread_pct(rollouts: list) -> float:
    """Share (%) of the batch's groups in which every rollout's advantage is 0 (equal rewards, or < 2 unmasked)."""
    groups: dict[int, bool] = {}
    for rollout in rollouts:
        groups[rollout.group_id] = groups.get(rollout.group_id, True) and rollout.advantage == 0.0
    return 100.0 * sum(groups.values()) / len(groups) if groups else 0.0


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mu = sum(values) / len(values)
    return math.sqrt(sum((x - mu) ** 2 for x in values) / len(values))
