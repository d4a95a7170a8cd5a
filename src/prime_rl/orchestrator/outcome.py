"""How an orchestrator run ends when it cannot go on: the errors it raises (`NoProgressError`, `ContextTooShort`),
the messages that say why a run trained nothing, and the first error of its task group."""

from __future__ import annotations

from collections import Counter
from typing import Any

from prime_rl.monitor.logger import get_logger

log = get_logger("orchestrator")


class NoProgressError(RuntimeError):
    """Too many consecutive steps had nothing to train (`orchestrator.max_empty_steps`), or the run ended having
    trained nothing at all; the message says why."""


class ContextTooShort(ValueError):
    """`seq_len` is above the context length the inference server reports."""


def no_progress_message(first: int, last: int, metrics: dict[str, Any], limit: int) -> str:
    """Why steps `first`..`last` had nothing to train, from the last step's `metrics` (its error kinds, filtered
    groups and the share of groups whose rewards were all equal). Equal rewards with a mean reward above 0 are told
    apart from all-zero ones: those come from a policy that answers each prompt the same way in every sample (it has
    converged on these prompts), not from a task too hard for it."""
    errors = {k.removeprefix("errors/"): v for k, v in metrics.items() if k.startswith("errors/")}
    top = ", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1])) or "none"
    reward = metrics.get("reward")
    scored = reward is not None and reward == reward and reward > 0
    causes = (
        "errors come from an environment whose verify fails, prompts longer than seq_len or an inference server "
        "that refuses requests; "
    )
    too_hard = (
        "equal rewards in every group come from a task too hard for the starting policy or a completion budget too "
        "small for the answer (train.sampling.max_completion_tokens)"
    )
    converged = (
        "equal rewards in every group with a mean reward above 0 come from a policy that answers each prompt the "
        "same way in all its samples (right on some prompts, wrong on others: it has converged on them): set "
        "orchestrator.max_empty_steps = None to run on to max_steps (steps without signal train nothing), or give "
        "it harder items, a larger train.group_size or a higher train.sampling.temperature"
    )
    return (
        f"steps {first}-{last}: {last - first + 1} consecutive steps with nothing to train (no loss token, or no "
        f"rollout with a nonzero advantage; orchestrator.max_empty_steps = {limit}, None never stops). Step {last}: "
        f"{metrics['num_rollouts']} rollouts, {metrics['error_pct']:.0f}% masked ({top}), "
        f"{metrics['filtered_groups']} group(s) filtered, "
        f"{metrics.get('zero_spread_groups_pct', float('nan')):.0f}% of groups with equal rewards (mean reward "
        f"{'n/a' if reward is None else f'{reward:.3g}'}), truncated {metrics['truncated_pct']:.0f}%. See "
        f"rollouts/step_{last}/traces.jsonl and logs/orchestrator.log: "
        + causes + (converged if scored else too_hard)
    )


def nothing_trained_message(first: int, steps: list[dict[str, Any]], masked: Counter) -> str:
    """Why a run whose every step (`first`, first + 1, ...: their metrics `steps`) had nothing to train trained
    nothing: the rollouts, the masked ones counted by reason (`masked`: error kind -> count over the run) and the
    mean reward of the unmasked ones."""
    num_rollouts = sum(m["num_rollouts"] for m in steps)
    top = ", ".join(f"{k} {v}" for k, v in masked.most_common()) or "none"
    rewards = [m["reward"] for m in steps if m.get("reward") is not None and m["reward"] == m["reward"]]
    mean = f"{sum(rewards) / len(rewards):.3g}" if rewards else "n/a"
    return (
        f"the run trained nothing: none of its {len(steps)} step(s) (steps {first}-{first + len(steps) - 1}) had a "
        f"loss token with a nonzero advantage. {num_rollouts} rollouts, {sum(masked.values())} masked ({top}); mean "
        f"reward of the others {mean}. See logs/orchestrator.log (each masked reason, a few per kind and step) and "
        "rollouts/step_N/traces.jsonl"
    )


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The first error of a task group (the others, if any, are logged with their tracebacks): the main loop and the
    weight watcher fail one at a time in practice, and the run ends with that error itself."""
    leaves = list(_leaves(group))
    for other in leaves[1:]:
        log.error("also failed: %r", other, exc_info=other)
    return leaves[0]


def _leaves(group: BaseExceptionGroup):
    for leaf in group.exceptions:
        if isinstance(leaf, BaseExceptionGroup):
            yield from _leaves(leaf)
        else:
            yield leaf
