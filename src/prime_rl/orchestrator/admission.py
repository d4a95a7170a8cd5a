"""Admission: what of a step's finished groups the trainer gets. A pure function between the scheduler (which
decides *which* groups make step N) and the packer (which lays their samples out for the trainer's ranks).

`admit(groups, cfg, step=N)` returns a `CutBatch` of new `Rollout` objects (the scheduler's are not written):

0. Reward shaping (`penalties`: the length penalty of a rollout's source, `prime_rl.orchestrator.gates`).
1. Advantages, per group, with the configured estimator (`prime_rl.orchestrator.advantages`); masked members are
   out of the baseline (docs/design.md invariant 3). An advantage that is not finite, or beyond float32's range
   (the trainer's dtype), masks its rollout as `advantage/non_finite` (invariant 7).
2. Group filters, in order (`group_filters(cfg)`): the first that names a reason takes the whole group out of the
   loss (`filtered`; counted in `filtered_groups`). Built in: the zero-advantage filter (`advantage.filter_zero`)
   and the signal gate (`[orchestrator.gate]`, `gates.make_gate`; the scheduler refills the step for the groups it
   rejects, so it filters only groups kept once the refill budget is spent). Further filters: docs/extending.md.
3. The truncation mask (`advantage.mask_truncated`): truncated rollouts leave the loss after their rewards entered
   their group's baseline.

An exception in an estimator or a filter raises `AdmissionError` naming the step, the group and its rollout ids,
with the original exception as its cause; the orchestrator stops the run with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prime_rl.config.orchestrator import AdvantageConfig
from prime_rl.config.recipes import LengthPenaltyConfig
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.advantages import compute_advantages
from prime_rl.orchestrator.gates import shape_rewards
from prime_rl.orchestrator.types import Rollout

log = get_logger("orchestrator.admission")

FLOAT32_MAX = float(np.finfo(np.float32).max)

GroupFilter = Callable[[Sequence[Rollout], AdvantageConfig], "str | None"]
"""`(group, cfg) -> reason or None`: a reason takes the whole group (its rollouts with advantages set) out of the
loss. Filters see every group of the step, masked members included."""


class AdmissionError(RuntimeError):
    """A group could not be collected or admitted (an estimator or filter raised, a rollout task failed); the
    message names the step, the group and its rollout ids, `__cause__` is the original exception."""


@dataclass
class CutBatch:
    """One step's admitted rollouts (groups in launch order) plus scheduling counters.

    `gate_rejected_groups`: groups the signal gate rejected while this step was filled (replaced, or in the batch out
    of the loss when the budget ran out); `gate_extra_rollouts`: rollouts sampled for this step beyond those in its
    batch; `gate_budget_spent`: the refill budget ran out (the batch holds groups without signal, filtered)."""

    step: int
    rollouts: list[Rollout]
    dropped_stale_groups: int
    filtered_groups: int
    max_off_policy: int
    wait_s: float
    gate_rejected_groups: int = 0
    gate_extra_rollouts: int = 0
    gate_budget_spent: bool = False


def off_policy(group: Sequence[Rollout], step: int) -> int:
    """Versions between the policy the trainer applies at `step` (N - 1) and the group's oldest token's policy."""
    versions = [v for r in group for v in r.policy_versions]
    return (step - 1) - min(versions) if versions else 0


def max_trained_off_policy(rollouts: Sequence[Rollout], step: int) -> int:
    """The step's `max_off_policy` metric: versions between the policy the trainer applies at `step` (N - 1) and the
    oldest token's policy, over the rollouts the loss sees (not masked, not `filtered`); 0 when none. Masked and
    filtered rollouts (a spent gate budget's rejected groups that fill the batch) are left out: they are not trained
    on."""
    trained = [v for r in rollouts if not r.masked and not r.filtered for v in r.policy_versions]
    return (step - 1) - min(trained) if trained else 0


def zero_advantage(group: Sequence[Rollout], cfg: AdvantageConfig) -> str | None:
    """`advantage.filter_zero`: a group whose advantages are all 0 carries no learning signal."""
    if all(r.advantage == 0.0 for r in group):
        return "every advantage is 0"
    return None


def group_filters(cfg: AdvantageConfig) -> list[GroupFilter]:
    """The group filters `cfg` turns on, in the order they run."""
    return [zero_advantage] if cfg.filter_zero else []


def group_label(group: Sequence[Rollout]) -> str:
    """`group 3 (rollouts t0/g3/r0, t0/g3/r1)`: how errors name a group."""
    gid = group[0].group_id if group else "?"
    ids = ", ".join(str(r.rollout_id or r.task.task_id) for r in group)
    return f"group {gid} (rollouts {ids})"


def with_advantages(group: Sequence[Rollout], cfg: AdvantageConfig) -> list[Rollout]:
    """Copies of `group`'s rollouts with their advantages; one the trainer cannot hold masks its rollout."""
    adv = compute_advantages([r.reward for r in group], [not r.masked for r in group], cfg)
    out = []
    for rollout, advantage in zip(group, adv, strict=True):
        rollout = dataclasses.replace(rollout, advantage=advantage)
        if not math.isfinite(advantage) or abs(advantage) > FLOAT32_MAX:
            rollout.mask("advantage/non_finite", f"the advantage estimator returned {advantage!r} (not a finite "
                         "float32, the trainer's dtype)")  # fmt: skip
            rollout.advantage = 0.0
        out.append(rollout)
    return out


def admit(
    groups: Sequence[Sequence[Rollout]],
    cfg: AdvantageConfig,
    *,
    step: int,
    filters: Sequence[GroupFilter] | None = None,
    penalties: Mapping[str, LengthPenaltyConfig] | None = None,
    per_source: Mapping[str, AdvantageConfig] | None = None,
    gate: GroupFilter | None = None,
    dropped_stale_groups: int = 0,
    wait_s: float = 0.0,
) -> CutBatch:
    """Advantages, group filters and the truncation mask of step `step`'s groups (see the module docstring).

    Args:
        groups: the step's groups, in the order the batch lists them (the scheduler passes launch order).
        cfg: `orchestrator.advantage`.
        filters: group filters to run (default: `group_filters` of the group's advantage config).
        per_source: advantage config per source name (a train source's `advantage`); `cfg` for the others.
        gate: the signal gate (`gates.make_gate`), run after the filters.
        penalties: length penalty per source name (`length_penalty` of a train source), applied before advantages.
        dropped_stale_groups, wait_s: the scheduler's counters, carried into the batch.

    Raises:
        AdmissionError: an estimator or filter raised (the original exception is the cause).
    """
    rollouts: list[Rollout] = []
    filtered = 0
    for group in groups:
        gcfg = (per_source or {}).get(group[0].source, cfg) if group else cfg
        run = [*(group_filters(gcfg) if filters is None else filters), *([gate] if gate is not None else [])]
        try:
            admitted = with_advantages(shape_rewards(group, penalties or {}), gcfg)
            reason = next((why for f in run if (why := f(admitted, gcfg)) is not None), None)
        except Exception as e:
            raise AdmissionError(f"step {step}: admission of {group_label(group)} failed: {type(e).__name__}: {e}") from e
        if reason is not None:
            filtered += 1
        for rollout in admitted:
            rollout.filtered = reason is not None or (gcfg.mask_truncated and rollout.truncated)
        rollouts += admitted
    return CutBatch(
        step=step,
        rollouts=rollouts,
        dropped_stale_groups=dropped_stale_groups,
        filtered_groups=filtered,
        max_off_policy=max_trained_off_policy(rollouts, step),
        wait_s=wait_s,
    )


def log_masked(step: int | str, rollouts: Sequence[Rollout], per_kind: int = 3) -> None:
    """Log why rollouts were masked: the first `per_kind` of each error kind with task, source and reason, then
    one line counting the rest of that kind (`step 3: 12 more rollout(s) masked as env/http_404`)."""
    seen: dict[str, int] = defaultdict(int)
    for rollout in rollouts:
        if not rollout.masked:
            continue
        kind = rollout.error_kind or "unknown"
        seen[kind] += 1
        if seen[kind] <= per_kind:
            log.warning("step %s: rollout %s of task %r (source %r) masked: %s", step, rollout.rollout_id or "-",
                        rollout.task.task_id, rollout.source, rollout.error or kind)  # fmt: skip
    for kind, count in seen.items():
        if count > per_kind:
            log.warning("step %s: %d more rollout(s) masked as %s", step, count - per_kind, kind)
