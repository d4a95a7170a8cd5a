"""Continuous rollout scheduling with bounded staleness.

- Up to `max_inflight` rollouts run at once (the scheduler's semaphore, shared with eval; lowered to what the
  sources admit together); a group of one task's rollouts (its source's group size: the source's `group_size`,
  else `train.group_size`) is launched as a unit.
- Asynchrony: step N's batch is cut only once policy version N - 1 - max_async_level is loaded (docs/design.md,
  "Policy versions"). With the latest loaded version v, steps up to S = v + 1 + max_async_level may be produced, so
  groups are launched only while the outstanding ones (running or finished but not yet cut) hold fewer than
  (S - N + 1) * batch_size rollouts while step N is being filled. `max_async_level = 0` is the synchronous baseline:
  one step's groups, all sampled with version N - 1. With more, a group that finishes after later-launched ones
  (cut in completion order) can train in a later step, older than N - 1 - max_async_level; `max_off_policy_steps`
  bounds it (next item).
- Staleness: when step N's batch is cut, a group whose oldest token came from a version older than
  N - 1 - max_off_policy_steps is dropped whole and replaced. A group whose rollouts report a version older than
  the one loaded when it was launched points at a backend that does not record the version it samples with; once
  such groups holding `STALE_STREAK_BATCHES` * `batch_size` rollouts were dropped in a row (no group kept in
  between), `next_batch` raises `StaleGroupsError` naming the versions, the step's bound and the fix. However
  groups are dropped, a step that admits no group and sees no new policy version for `weights_timeout_s` raises
  `TimeoutError` (counting the drops), so the run never loops on groups it throws away.
- Finished groups are cut in completion order: the first ones that hold `batch_size` rollouts make the step (with
  one group size, `batch_size / group_size` groups; with several, the group that reaches `batch_size` is included,
  so a step holds fewer than `batch_size` + the largest group size rollouts, and a group launched for step N may
  be cut into step N + 1);
  within the step they are listed in launch order (group id), so the trainer's input, and the order of its fp32
  sums, do not depend on which group finished first (a seeded synchronous run is reproducible bit for bit under
  any load). The cut groups go through admission (`prime_rl.orchestrator.admission.admit`: advantages, filters,
  truncation mask); the masked rollouts' reasons are logged, a few per kind.
- Signal gate and refill (`[orchestrator.gate]`, `prime_rl.orchestrator.gates`): finished groups are examined in
  completion order; a group the gate rejects leaves the outstanding count, so a replacement is launched within the
  same bound. A step examines groups holding at most `resample_budget` rollouts (each group counted with its own
  size); when they are spent it is cut with the groups that passed, filled with rejected ones (out of the loss) to
  its size, and a warning says so. The groups still outstanding at such a cut were launched as replacements for
  the rejected groups that now fill the batch, so they overrun the `max_async_level` window by those groups: each
  is marked, and dropped when examined if its oldest token is older than the step's bound (N - 1 -
  `max_async_level`), so trained rollouts keep the bound (`max_async_level = 0` stays synchronous).
- `token_batch_size`: a step is cut once its groups hold that many prompt+completion tokens, or at `batch_size`
  rollouts, whichever comes first (the bound above still counts `batch_size` rollouts per step).
- Curriculum (`prime_rl.orchestrator.curriculum`): every examined group's outcomes are recorded in the pool.
- Per-source settings: a train source's own `sampling` (and its `max_completion_tokens`) samples its rollouts; its
  own `advantage` section computes its groups' advantages and filters, in the gate and in admission.
- Errored rollouts are counted as their groups finish (`prime_rl.orchestrator.error_streak`): a streak of
  `max_consecutive_errors` masked rollouts, or more than `max_error_rate` of the last `error_rate_window`, makes the
  next `next_batch` raise `ErrorStreakError`.
- Every task the scheduler starts is kept (a group's rollout tasks and its collector). A collector that fails (a
  rollout task raised instead of masking its rollout) makes the next `next_batch` raise `AdmissionError` naming
  the group, at once; so does an estimator or filter that raises in admission.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prime_rl.config.orchestrator import OrchestratorConfig, batch_size_problem
from prime_rl.inference.backend import InferenceBackend
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.admission import (
    AdmissionError,
    CutBatch,
    admit,
    log_masked,
    off_policy,
    with_advantages,
)
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.curriculum import DifficultyPool
from prime_rl.orchestrator.error_streak import ErrorStreak, ErrorStreakError
from prime_rl.orchestrator.gates import make_gate, resample_budget, shape_rewards
from prime_rl.orchestrator.sources import CapacityGate, TaskSource
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.teacher import Teacher
from prime_rl.orchestrator.types import PolicyVersion, Rollout
from prime_rl.orchestrator.workers import WorkerPool

log = get_logger("orchestrator.scheduler")

__all__ = ["STALE_STREAK_BATCHES", "CutBatch", "Group", "Scheduler", "StaleGroupsError", "effective_max_inflight",
           "off_policy"]

STALE_STREAK_BATCHES = 2
"""`StaleGroupsError` once groups launched at an accepted policy version but reporting older ones, holding this many
batches' rollouts, were dropped as stale in a row."""


class StaleGroupsError(RuntimeError):
    """Groups were dropped as stale in a row although each was launched while a policy version the step accepts was
    loaded: the backend records policy versions older than the one it serves (the message names them, the bound of
    `max_off_policy_steps` and the fix)."""


@dataclass
class Group:
    """A group of `size` rollouts of one task (its source's group size): its rollout tasks, then (collected) its
    rollouts."""

    gid: int
    source_idx: int
    task_pos: int
    size: int = 0
    launch_version: int = 0  # the policy version loaded when the group was launched
    carried: bool = False  # outstanding when a step was cut with the gate's budget spent (see the module docstring)
    rollouts: list[Rollout] = field(default_factory=list)
    tasks: list[asyncio.Task] = field(default_factory=list)
    collector: asyncio.Task | None = None


def effective_max_inflight(max_inflight: int, sources: list[TaskSource]) -> int:
    """`concurrency.max_inflight`, lowered to what the sources admit together when every one reports a capacity
    (a resources server's `max_concurrent`), with a warning saying so."""
    caps = [s.capacity for s in sources]
    if caps and all(c is not None for c in caps) and sum(caps) < max_inflight:
        log.warning(
            "concurrency.max_inflight (%d) is above what the environment server(s) admit (%d): using %d",
            max_inflight, sum(caps), sum(caps),
        )
        return sum(caps)
    return max_inflight


class Scheduler:
    """Keeps rollouts in flight and cuts step batches (see the module docstring).

    Args:
        cfg: the orchestrator config; the scheduler reads `batch_size`, `train` (group size, sampling, the sources'
            `sampling`, `advantage` and `length_penalty`), `advantage`, `gate`, `token_batch_size`,
            `concurrency.max_inflight`, `max_async_level`, `max_off_policy_steps`, `seq_len` and
            `weights_timeout_s`.
        sources, stream: the train sources (started: their capacities are known) and the task stream over them.
        client, renderer: the inference backend and the chat renderer of the agent loop.
        policy: the policy version the backend serves now (set by the weight watcher).
        gate: per-source capacity limits, shared with eval.
        curriculum: the difficulty pool that observes every examined group (None: no curriculum).
        teacher: on-policy distillation's teacher, which scores every collected group before it is examined
            (`prime_rl.orchestrator.teacher`; None: no teacher).
        workers: the rollout worker processes that play the rollouts (`prime_rl.orchestrator.workers`; None: the
            agent loop runs in this process). A worker failure makes the next `next_batch` raise it.

    `sem` bounds the rollouts running at once (train and eval share it) to `max_inflight`.

    Raises:
        ValueError: `batch_size` does not fit the sources' group sizes (`config.orchestrator.batch_size_problem`).
    """

    def __init__(
        self,
        cfg: OrchestratorConfig,
        *,
        sources: list[TaskSource],
        stream: TaskStream,
        client: InferenceBackend,
        renderer: Any,
        policy: PolicyVersion,
        gate: CapacityGate | None = None,
        curriculum: DifficultyPool | None = None,
        teacher: Teacher | None = None,
        workers: WorkerPool | None = None,
    ):
        if (problem := batch_size_problem(cfg.batch_size, cfg.train)) is not None:
            raise ValueError(problem)
        self.sources, self.stream, self.client, self.renderer = sources, stream, client, renderer
        self.sampling, self.advantage, self.policy = cfg.train.sampling, cfg.advantage, policy
        self.limits = AgentLimits(cfg.seq_len, cfg.train.sampling.max_completion_tokens, cfg.reward_range)
        self.batch_size = cfg.batch_size
        self.size_of = {s.name: cfg.train.group_size_of(s) for s in cfg.train.source}
        self.default_group_size = cfg.train.group_size
        self.max_inflight = effective_max_inflight(cfg.concurrency.max_inflight, sources)
        self.max_async_level, self.max_off_policy_steps = cfg.max_async_level, cfg.max_off_policy_steps
        self.weights_timeout_s = cfg.weights_timeout_s
        self.sem = asyncio.Semaphore(self.max_inflight)
        self.gate = gate or CapacityGate()
        self.running: dict[int, Group] = {}
        self.ready: deque[Group] = deque()
        self._gid = itertools.count()
        self._wake = asyncio.Event()
        policy.listeners.append(self._wake)
        self.total_dropped = 0
        self.misreported: list[Group] = []  # groups dropped in a row, reporting versions older than their launch's
        self.failure: BaseException | None = None  # the first collector failure, raised by next_batch
        self.errors = ErrorStreak(cfg.max_consecutive_errors, cfg.max_error_rate, cfg.error_rate_window)
        self.curriculum = curriculum
        self.teacher = teacher
        self.gate_cfg, self.token_batch_size = cfg.gate, cfg.token_batch_size
        self.signal_gate = make_gate(cfg.gate) if cfg.gate.enabled else None
        self.budget = resample_budget(cfg.gate, self.batch_size) if self.signal_gate else None
        self.advantage_of = {s.name: s.advantage for s in cfg.train.source if s.advantage is not None}
        self.sampling_of = {s.name: s.sampling for s in cfg.train.source if s.sampling is not None}
        self.penalties = {s.name: s.length_penalty for s in cfg.train.source if s.length_penalty is not None}
        self.passed: list[Group] = []  # examined groups of the step being filled that the gate admitted
        self.rejected: list[Group] = []  # ... that it rejected
        self.total_rejected = 0
        self.total_carried_dropped = 0  # carried groups dropped as older than the max_async_level bound
        self._drawn: tuple[int, int, Any] | None = None  # a task drawn whose group did not fit max_inflight yet
        self.workers = workers
        if workers is not None:
            workers.listeners.append(self._worker_failed)

    # ---- launching ----
    def group_size(self, source_idx: int) -> int:
        """The group size of train source `source_idx` (its own `group_size`, else `train.group_size`)."""
        return self.size_of.get(self.sources[source_idx].name, self.default_group_size)

    def _allowed_rollouts(self, step: int) -> int:
        s_max = self.policy.version + 1 + self.max_async_level
        return max(0, s_max - step + 1) * self.batch_size

    @property
    def outstanding_groups(self) -> int:
        """Groups drawn and not cut: running, finished, or examined and admitted for the step being filled."""
        return len(self.running) + len(self.ready) + len(self.passed)

    @property
    def outstanding_rollouts(self) -> int:
        """Rollouts of the outstanding groups (`outstanding_groups`), each group counted with its own size."""
        return sum(g.size for groups in (self.running.values(), self.ready, self.passed) for g in groups)

    @property
    def inflight(self) -> int:
        """Train rollouts running now (started, not finished)."""
        return sum(1 for g in self.running.values() for t in g.tasks if not t.done())

    def _launch(self, step: int) -> None:
        while self.outstanding_rollouts < self._allowed_rollouts(step):
            if self._drawn is None:
                self._drawn = self.stream.next()
            source_idx, task_pos, task = self._drawn
            size = self.group_size(source_idx)
            if self.running and self.inflight + size > self.max_inflight:
                return  # launched once enough of the running rollouts finish
            self._drawn = None
            group = Group(next(self._gid), source_idx, task_pos, size, launch_version=self.policy.version)
            src = self.sources[source_idx]
            for member in range(size):
                rid = f"{task.task_id}/g{group.gid}/r{member}"
                group.tasks.append(asyncio.create_task(self._one(src, task, group, rid), name=rid))
            self.running[group.gid] = group
            group.collector = asyncio.create_task(self._collect(group), name=f"collect-g{group.gid}")
            group.collector.add_done_callback(self._collected)

    async def _one(self, src: TaskSource, task, group: Group, rid: str) -> Rollout:
        sampling, limits = self.sampling, self.limits
        if (own := self.sampling_of.get(src.name)) is not None:  # the source's own `sampling`
            sampling, limits = own, dataclasses.replace(limits, max_completion_tokens=own.max_completion_tokens)
        async with self.sem, self.gate(src):
            if self.workers is not None:
                return await self.workers.play(task, group.source_idx, group.task_pos, sampling, limits,
                                               rollout_id=rid, group_id=group.gid, policy_version=self.policy.version)
            return await run_rollout(task, src, self.client, self.renderer, sampling, limits, rollout_id=rid,
                                     group_id=group.gid)  # fmt: skip

    def _worker_failed(self, error: BaseException) -> None:
        """A rollout worker failed (`WorkerPool.listeners`): the next `next_batch` raises `error`."""
        if self.failure is None:
            self.failure = error
        self._wake.set()

    async def _collect(self, group: Group) -> None:
        try:
            group.rollouts = list(await asyncio.gather(*group.tasks))
            if self.teacher is not None:
                await self.teacher.score_group(group.rollouts)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            for task in group.tasks:
                task.cancel()
            raise AdmissionError(f"collection of {_pending_label(group)} failed: {type(e).__name__}: {e}") from e
        self.running.pop(group.gid, None)
        self.ready.append(group)
        if self.errors.enabled and (stop := self.errors.observe(group.rollouts)) is not None and self.failure is None:
            self.failure = ErrorStreakError(stop)
        self._wake.set()

    def _collected(self, task: asyncio.Task) -> None:
        """Done callback of every collector: keep the first failure and wake `next_batch`, which raises it."""
        if task.cancelled() or task.exception() is None:
            return
        if self.failure is None:
            self.failure = task.exception()
        self._wake.set()

    # ---- cutting ----
    def _drop_stale(self, step: int) -> int:
        """Drop the finished groups older than `max_off_policy_steps` for `step`, and the carried ones (outstanding at
        a cut with the gate's budget spent) older than `max_async_level`; returns how many.

        Raises:
            StaleGroupsError: the run of dropped groups that report versions older than their launch's (no group
                kept in between) reached `STALE_STREAK_BATCHES` * `batch_size` rollouts.
        """
        keep, dropped = deque(), 0
        for group in self.ready:
            if group.carried and off_policy(group.rollouts, step) > self.max_async_level:
                dropped += 1  # a spent gate budget's surplus, sampled before the step's max_async_level bound
                self.total_carried_dropped += 1
            elif off_policy(group.rollouts, step) > self.max_off_policy_steps:
                dropped += 1
                if min(v for r in group.rollouts for v in r.policy_versions) < group.launch_version:
                    self.misreported.append(group)
            else:
                keep.append(group)
                self.misreported.clear()
        self.ready = keep
        if sum(g.size for g in self.misreported) >= STALE_STREAK_BATCHES * self.batch_size:
            raise StaleGroupsError(self._misreported_message(step))
        return dropped

    def _misreported_message(self, step: int) -> str:
        groups = self.misreported
        reported = sorted({min(v for r in g.rollouts for v in r.policy_versions) for g in groups})
        launched = sorted({g.launch_version for g in groups})
        need = step - 1 - self.max_off_policy_steps
        return (
            f"step {step}: {len(groups)} rollout groups in a row ({sum(g.size for g in groups)} rollouts) were dropped "
            f"as stale although each was launched while policy version {_span(launched)} was loaded: their rollouts "
            f"report policy version {_span(reported)}, older than step {step} accepts (>= {need} = step - 1 - "
            f"orchestrator.max_off_policy_steps={self.max_off_policy_steps}). The inference backend does not record "
            "the policy version it samples with; a backend must report the version it serves on every generate "
            "result (`policy_version`, docs/extending.md) and load each new one in `update_weights`. Raising "
            "orchestrator.max_off_policy_steps only delays this error."
        )

    def _step_full(self, groups: list[Group]) -> bool:
        if sum(g.size for g in groups) >= self.batch_size:
            return True
        if self.token_batch_size is None:
            return False
        return sum(r.num_tokens for g in groups for r in g.rollouts) >= self.token_batch_size

    def _examine(self, step: int) -> None:
        """Move finished groups to `passed`/`rejected` (completion order) until the step is full or the budget
        is spent."""
        while self.ready and not self._step_full(self.passed) and not self._budget_spent():
            group = self.ready.popleft()
            if self.curriculum is not None:
                self.curriculum.observe(group.rollouts)
            if self.signal_gate is None:
                self.passed.append(group)
                continue
            try:
                adv = self.advantage_of.get(self.sources[group.source_idx].name, self.advantage)
                reason = self.signal_gate(with_advantages(shape_rewards(group.rollouts, self.penalties), adv), adv)
            except Exception as e:
                raise AdmissionError(f"step {step}: the gate on {_pending_label(group)} failed: {type(e).__name__}: {e}") from e
            (self.passed if reason is None else self.rejected).append(group)

    def _budget_spent(self) -> bool:
        return self.budget is not None and sum(g.size for g in (*self.passed, *self.rejected)) >= self.budget

    async def next_batch(self, step: int) -> CutBatch:
        """Wait until `batch_size` rollouts for `step` are ready, take them and admit them (`admission.admit`).

        Raises:
            AdmissionError: a group's collection failed (raised at once, whatever group it was) or its admission
                did (an estimator or filter raised); names the group and its rollout ids, the cause kept.
            WorkerError: a rollout worker failed (`WorkerDied`: it exited; names it, its exit and its rollouts).
            ErrorStreakError: too many collected rollouts in a row (or of the recent ones) were masked.
            StaleGroupsError: groups launched at an accepted policy version were dropped as stale in a row, their
                rollouts reporting older versions (`_drop_stale`).
            TimeoutError: no group was kept (finished and not dropped as stale) and no policy version arrived for
                `weights_timeout_s` seconds; names the groups dropped as stale meanwhile.
        """
        t0 = time.monotonic()
        dropped = 0
        last_progress, seen = time.monotonic(), (self.policy.version, 0)
        dropped_since = 0  # groups dropped as stale since the last progress
        while True:
            if self.failure is not None:
                raise self.failure
            stale = self._drop_stale(step)
            if stale:
                log.info("step %d: dropped %d group(s) older than max_off_policy_steps=%d (or, carried over a spent "
                         "gate budget, than max_async_level=%d)", step, stale, self.max_off_policy_steps,
                         self.max_async_level)  # fmt: skip
                dropped += stale
                dropped_since += stale
                self.total_dropped += stale
            self._examine(step)
            if self._step_full(self.passed) or self._budget_spent():
                break
            now, state = time.monotonic(), (self.policy.version, len(self.passed) + len(self.rejected))
            if state != seen:  # a group kept or a new policy version
                last_progress, seen, dropped_since = now, state, 0
            elif now - last_progress > self.weights_timeout_s:
                raise TimeoutError(self._timeout_message(step, dropped_since)) from None
            self._launch(step)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)
            except TimeoutError:
                pass
        await self.policy.wait_for(step - 1 - self.max_async_level, self.weights_timeout_s)
        chosen, spent = self.passed, not self._step_full(self.passed)
        fill = []
        for group in self.rejected:
            if not spent or self._step_full(chosen + fill):
                break
            fill.append(group)
        if spent:
            for group in [*self.running.values(), *self.ready]:
                group.carried = True
            log.warning(
                "step %d: gate refill budget spent (%d groups examined, max_resample_factor=%g): training %d group(s) "
                "with signal; %d rejected group(s) fill the batch out of the loss", step,
                len(self.passed) + len(self.rejected), self.gate_cfg.max_resample_factor, len(self.passed), len(fill),
            )  # fmt: skip
        groups = sorted(chosen + fill, key=lambda g: g.gid)
        n_rejected = len(self.rejected)
        self.total_rejected += n_rejected
        extra = sum(g.size for g in self.rejected) - sum(g.size for g in fill)  # sampled beyond the batch
        self.passed, self.rejected = [], []
        batch = admit([g.rollouts for g in groups], self.advantage, step=step, penalties=self.penalties,
                      per_source=self.advantage_of, gate=self.signal_gate, dropped_stale_groups=dropped,
                      wait_s=time.monotonic() - t0)  # fmt: skip
        batch.gate_rejected_groups = n_rejected
        batch.gate_extra_rollouts = extra
        batch.gate_budget_spent = spent
        log_masked(step, batch.rollouts)
        self._launch(step + 1)
        return batch

    def _timeout_message(self, step: int, dropped_since: int) -> str:
        if dropped_since:
            need = step - 1 - self.max_off_policy_steps
            return (
                f"step {step}: no rollout group kept and no new policy version for {self.weights_timeout_s:g} s "
                f"(orchestrator.weights_timeout_s): {dropped_since} group(s) finished and were dropped as stale "
                f"(older than policy version {need} = step - 1 - orchestrator.max_off_policy_steps="
                f"{self.max_off_policy_steps}; policy version {self.policy.version} loaded). Rollouts take longer than "
                "max_off_policy_steps trainer steps: raise orchestrator.max_off_policy_steps or shorten the rollouts "
                "(max_completion_tokens, the environment's turns); see logs/inference.log"
            )
        need = step - 1 - self.max_async_level
        return (
            f"step {step}: no rollout group finished and no new policy version for {self.weights_timeout_s:g} s "
            f"(policy version {self.policy.version}, need >= {need}, {self.inflight} rollouts running); see "
            "logs/trainer.log and logs/inference.log"
        )

    def recipe_metrics(self, batch: CutBatch) -> dict[str, float]:
        """Metrics of the recipes that are on: `gate/rejected_groups`, `gate/extra_rollouts`, `gate/budget_spent`,
        `gate/rejected_total`; `batch_tokens` (prompt+completion) with `token_batch_size`; `curriculum/easy_tasks`,
        `curriculum/hard_tasks`, `curriculum/mixed_tasks`. The length penalty's mean is `env/length_penalty`."""
        metrics: dict[str, float] = {}
        if self.signal_gate is not None:
            metrics["gate/rejected_groups"] = batch.gate_rejected_groups
            metrics["gate/extra_rollouts"] = batch.gate_extra_rollouts
            metrics["gate/budget_spent"] = int(batch.gate_budget_spent)
            metrics["gate/rejected_total"] = self.total_rejected
        if self.token_batch_size is not None:
            metrics["batch_tokens"] = sum(r.num_tokens for r in batch.rollouts)
        if self.curriculum is not None:
            metrics.update({f"curriculum/{k}_tasks": v for k, v in self.curriculum.counts().items()})
        return metrics

    # ---- checkpoint / shutdown ----
    def outstanding(self) -> list[tuple[int, int]]:
        """(source idx, task position) of every group drawn but not cut yet, in draw order (a task drawn but not
        launched yet last)."""
        groups = sorted(list(self.running.values()) + list(self.ready) + self.passed, key=lambda g: g.gid)
        drawn = [] if self._drawn is None else [self._drawn[:2]]
        return [(g.source_idx, g.task_pos) for g in groups] + drawn

    async def aclose(self) -> None:
        """Cancel running rollouts (each closes its episode) and their collectors, and wait for them."""
        tasks = [t for g in self.running.values() for t in [*g.tasks, g.collector] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()
        if self._wake in self.policy.listeners:
            self.policy.listeners.remove(self._wake)


def _pending_label(group: Group) -> str:
    """`group 3 (rollouts t0/g3/r0, ...)` from the group's rollout task names (its rollouts are not collected)."""
    return f"group {group.gid} (rollouts {', '.join(t.get_name() for t in group.tasks)})"


def _span(versions: list[int]) -> str:
    """`3` for one version, `0..2` for several (sorted)."""
    return str(versions[0]) if len(versions) == 1 else f"{versions[0]}..{versions[-1]}"
