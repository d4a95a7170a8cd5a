"""The asynchronous RL pipeline as a discrete-event model: orchestrator, trainer, weight transfer, control plane.

The semantics follow the real processes (prime_rl.orchestrator.scheduler, orchestrator.main, trainer.rl):

- Policy version N is the trainer's weights after step N (version 0: the start). Trainer step N trains on batch N
  with version N - 1 and publishes version N.
- Filling step N with loaded version v, the orchestrator keeps at most `max(0, v + 1 + max_async_level - N + 1)
  * batch_size / group_size` groups outstanding (running, or finished and not cut), and at most `max_inflight`
  rollouts running (a group is launched whole; the first one always). It launches when a group finishes, when a
  version is loaded and after a cut, as the scheduler's wake-ups do.
- Step N is cut when `batch_size / group_size` groups are finished (the first ones in completion order) and the
  loaded version is at least `N - 1 - max_async_level`; groups whose oldest turn is more than
  `max_off_policy_steps` behind `N - 1` are dropped first. The cut batch is then available to the trainer.
- The trainer starts step N when batch N is available and step N - 1 is done; it takes
  `step_fixed_s + tokens / tokens_per_s`, then publishes (`weights.publish_s`, trainer busy).
- The weight watcher loads the newest published version when it is not loading one (intermediate versions are
  skipped): every replica pauses `weights.load_s`, then the orchestrator records the version. With
  `transport = "broadcast"` the load starts with the publish instead of after it.
- A rollout's turn costs `cpu_per_turn_s` on its group's control-plane worker (FIFO), then one generate request on
  the replica that served its first turn (the first goes to the replica with the fewest outstanding requests),
  then the environment's latency. A turn's policy version is the replica's version when its prefill started (the
  oldest version that sampled any of its tokens, as vLLM reports it).
- A finished rollout then costs `scheduler_cpu_per_rollout_s` on the one scheduler process (FIFO); only then does
  it leave `max_inflight` and count towards its group (the scheduler decodes, admits and packs it).

Results are collected by `prime_rl.simulate.report`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from prime_rl.config.plan import PlanConfig
from prime_rl.simulate.events import EventQueue
from prime_rl.simulate.replica import Replica, Request


class InfeasiblePlan(RuntimeError):
    """The configured deployment cannot finish its steps (it stalls, or drops every group as stale)."""


@dataclass
class SimRollout:
    """One rollout: its turns' sampled tokens and policy versions, its total (trained) tokens."""

    completion: list[int]
    versions: list[int] = field(default_factory=list)
    seq_tokens: int = 0
    replica: Replica | None = None


@dataclass
class SimGroup:
    gid: int
    rollouts: list[SimRollout]
    left: int
    worker: int
    oldest: int = 0  # the oldest policy version of any of its turns (set when the group finishes)


@dataclass
class StepRecord:
    """One trainer step: when its batch was cut, when training started and ended, its groups' policy-version lags."""

    step: int
    cut_t: float
    train_start: float = float("nan")
    train_end: float = float("nan")
    tokens: int = 0
    completion_tokens: int = 0
    max_off_policy: int = 0
    lag_tokens: dict[int, int] = field(default_factory=dict)
    dropped_groups: int = 0


class Pipeline:
    """The simulated deployment of `cfg`; `run()` plays it until the trainer finished `cfg.steps` steps."""

    def __init__(self, cfg: PlanConfig):
        self.cfg = cfg
        self.q = EventQueue()
        self.rng = np.random.default_rng(cfg.seed)
        self.replicas = [Replica(i, self.q, cfg.inference) for i in range(cfg.inference.replicas)]
        pipe = cfg.pipeline
        self.group_size, self.gps = pipe.group_size, pipe.batch_size // pipe.group_size
        # orchestrator
        self.version = 0
        self.step = 1
        self.running: dict[int, SimGroup] = {}
        self.ready: deque[SimGroup] = deque()
        self.inflight = 0
        self._gid = 0
        self.cuts: list[StepRecord] = []
        self.dropped = 0
        self._dropped_now = 0  # dropped while filling the current step
        # control plane
        self.worker_free = [0.0] * cfg.control_plane.workers
        self.worker_busy = [0.0] * cfg.control_plane.workers
        self.scheduler_free = 0.0
        self.scheduler_busy = 0.0
        # trainer
        self.batches: dict[int, StepRecord] = {}
        self.train_next = 1
        self.trainer_busy_until = 0.0
        self.trainer_idle = True
        self.trainer_busy_s = 0.0
        self.done_steps = 0
        # weights
        self.published = 0
        self.loading = False
        self.loads: list[tuple[float, float, int]] = []
        # counters at the end of the warm-up and of the last step (prime_rl.simulate.report reads them)
        self.marks: dict[str, dict[str, float | list[float]]] = {}

    # ---- workload draws ----
    def _draw_rollout(self) -> SimRollout:
        workload = self.cfg.workload
        turns = (workload.turns if workload.turns_min is None
                 else int(self.rng.integers(workload.turns_min, workload.turns + 1)))
        if workload.completion_tokens_cv > 0:
            shape = 1.0 / workload.completion_tokens_cv**2
            toks = self.rng.gamma(shape, workload.completion_tokens / shape, size=turns)
        else:
            toks = np.full(turns, workload.completion_tokens)
        toks = np.maximum(1, np.rint(toks)).astype(int)
        if workload.max_completion_tokens is not None:
            toks = np.minimum(toks, workload.max_completion_tokens)
        comp = [int(t) for t in toks]
        seq = workload.prompt_tokens + sum(comp) + workload.env_tokens * (turns - 1)
        return SimRollout(completion=comp, seq_tokens=seq)

    def _env_latency(self) -> float:
        env = self.cfg.env
        if env.latency_s <= 0:
            return 0.0
        if env.latency_cv <= 0:
            return env.latency_s
        shape = 1.0 / env.latency_cv**2
        return float(self.rng.gamma(shape, env.latency_s / shape))

    # ---- orchestrator: launching ----
    def _allowed_groups(self) -> int:
        s_max = self.version + 1 + self.cfg.pipeline.max_async_level
        return max(0, s_max - self.step + 1) * self.gps

    def _launch(self) -> None:
        max_inflight = self.cfg.pipeline.max_inflight
        while len(self.running) + len(self.ready) < self._allowed_groups():
            if self.running and self.inflight + self.group_size > max_inflight:
                return
            group = SimGroup(self._gid, [self._draw_rollout() for _ in range(self.group_size)], self.group_size,
                         self._gid % self.cfg.control_plane.workers)  # fmt: skip
            self._gid += 1
            self.running[group.gid] = group
            self.inflight += self.group_size
            for rollout in group.rollouts:
                self._turn(group, rollout, 0)

    def _turn(self, group: SimGroup, rollout: SimRollout, turn: int) -> None:
        """Turn `k` of rollout `r`: control-plane CPU, then the generate request."""
        cost = self.cfg.control_plane.cpu_per_turn_s
        if cost > 0:
            worker = group.worker
            start = max(self.q.now, self.worker_free[worker])
            self.worker_free[worker] = start + cost
            self.worker_busy[worker] += cost
            self.q.at(start + cost, lambda: self._generate(group, rollout, turn))
        else:
            self._generate(group, rollout, turn)

    def _generate(self, group: SimGroup, rollout: SimRollout, turn: int) -> None:
        if rollout.replica is None:
            rollout.replica = min(self.replicas, key=lambda x: (x.outstanding, x.idx))
        workload = self.cfg.workload
        prefill = workload.prompt_tokens if turn == 0 else workload.env_tokens

        def done(version: int) -> None:
            rollout.versions.append(version)
            lat = self._env_latency()
            nxt = ((lambda: self._turn(group, rollout, turn + 1)) if turn + 1 < len(rollout.completion)
                   else (lambda: self._finished(group)))
            if lat > 0:
                self.q.after(lat, nxt)
            else:
                nxt()

        rollout.replica.submit(Request(prefill, rollout.completion[turn], done))

    def _finished(self, group: SimGroup) -> None:
        """A rollout's last turn is done: the scheduler process's CPU for it (FIFO), then it is admitted."""
        cost = self.cfg.control_plane.scheduler_cpu_per_rollout_s
        if cost > 0:
            start = max(self.q.now, self.scheduler_free)
            self.scheduler_free = start + cost
            self.scheduler_busy += cost
            self.q.at(start + cost, lambda: self._admitted(group))
        else:
            self._admitted(group)

    def _admitted(self, group: SimGroup) -> None:
        self.inflight -= 1
        group.left -= 1
        if group.left == 0:
            del self.running[group.gid]
            group.oldest = min(v for r in group.rollouts for v in r.versions)
            self.ready.append(group)
            self._progress()

    # ---- orchestrator: cutting ----
    def _off_policy(self, group: SimGroup, step: int) -> int:
        return (step - 1) - group.oldest

    def _progress(self) -> None:
        """The scheduler's loop after a wake-up: drop stale groups, cut every step that can be cut, launch."""
        pipe = self.cfg.pipeline
        while True:
            if self.ready and self.step - 1 - min(g.oldest for g in self.ready) > pipe.max_off_policy_steps:
                keep = deque(g for g in self.ready if self._off_policy(g, self.step) <= pipe.max_off_policy_steps)
                n_drop = len(self.ready) - len(keep)
                self.ready = keep
                self.dropped += n_drop
                self._dropped_now += n_drop
                if self.dropped > 20 * self.gps * self.cfg.steps:
                    raise InfeasiblePlan(
                        f"step {self.step}: {self.dropped} groups dropped as older than pipeline.max_off_policy_steps "
                        f"= {pipe.max_off_policy_steps}; this deployment cannot fill a batch (raise "
                        "max_off_policy_steps or lower pipeline.max_async_level)"
                    )
            if len(self.ready) < self.gps or self.version < self.step - 1 - pipe.max_async_level:
                break
            self._cut()
        self._launch()

    def _cut(self) -> None:
        step = self.step
        groups = [self.ready.popleft() for _ in range(self.gps)]
        rec = StepRecord(step, self.q.now, dropped_groups=self._dropped_now)
        self._dropped_now = 0
        for group in groups:
            rec.max_off_policy = max(rec.max_off_policy, self._off_policy(group, step))
            for rollout in group.rollouts:
                rec.tokens += rollout.seq_tokens
                rec.completion_tokens += sum(rollout.completion)
                for version, tokens in zip(rollout.versions, rollout.completion, strict=True):
                    lag = (step - 1) - version
                    rec.lag_tokens[lag] = rec.lag_tokens.get(lag, 0) + tokens
        self.cuts.append(rec)
        self.batches[step] = rec
        self.step += 1
        self._train_maybe()

    # ---- trainer ----
    def _train_maybe(self) -> None:
        step = self.train_next
        if not self.trainer_idle or step not in self.batches or step > self.cfg.steps:
            return
        rec = self.batches[step]
        trainer = self.cfg.trainer
        dur = trainer.step_fixed_s + rec.tokens / trainer.tokens_per_s
        rec.train_start = self.q.now
        self.trainer_idle = False
        self.q.after(dur, lambda: self._trained(rec))

    def _trained(self, rec: StepRecord) -> None:
        weights = self.cfg.weights
        rec.train_end = self.q.now
        self.trainer_busy_s += rec.train_end - rec.train_start
        if weights.transport == "broadcast":
            self._published(rec.step)
        self.trainer_busy_s += weights.publish_s
        self.q.after(weights.publish_s, lambda: self._publish_done(rec.step))

    def _publish_done(self, step: int) -> None:
        if self.cfg.weights.transport == "filesystem":
            self._published(step)
        self.trainer_idle = True
        self.done_steps = step
        if step == self.cfg.warmup_steps:
            self._mark("start")
        if step == self.cfg.steps:
            self._mark("end")
        self.train_next = step + 1
        self._train_maybe()

    # ---- weights ----
    def _published(self, version: int) -> None:
        self.published = version
        self._load_maybe()

    def _load_maybe(self) -> None:
        if self.loading or self.published <= self.version:
            return
        version, t0 = self.published, self.q.now
        self.loading = True
        for replica in self.replicas:
            replica.pause()

        def loaded() -> None:
            for replica in self.replicas:
                replica.resume(version)
            self.loads.append((t0, self.q.now, version))
            self.loading = False
            self.version = version
            self._progress()
            self._load_maybe()

        self.q.after(self.cfg.weights.load_s, loaded)

    def _mark(self, name: str) -> None:
        for replica in self.replicas:
            replica.close_accounts()
        self.marks[name] = {
            "t": self.q.now,
            "busy": [r.busy_s for r in self.replicas],
            "load": [r.load_s for r in self.replicas],
            "seq": [r.seq_s for r in self.replicas],
            "tokens": [float(r.tokens) for r in self.replicas],
            "trainer": self.trainer_busy_s,
            # CPU done by now: each FIFO server is busy without a gap from now until its queue is served
            "workers": [b - max(0.0, f - self.q.now) for b, f in zip(self.worker_busy, self.worker_free, strict=True)],
            "scheduler": self.scheduler_busy - max(0.0, self.scheduler_free - self.q.now),
        }

    # ---- run ----
    def run(self) -> Pipeline:
        """Play the deployment until the trainer finished `cfg.steps` steps.

        Raises:
            InfeasiblePlan: the pipeline stalls or drops every group as stale.
        """
        if self.cfg.warmup_steps == 0:
            self._mark("start")
        self._launch()
        self.q.run(lambda: self.done_steps >= self.cfg.steps)
        if self.done_steps < self.cfg.steps:
            raise InfeasiblePlan(
                f"the simulated pipeline stalled after {self.done_steps} trainer steps (step {self.step} waits for "
                f"{self.gps} groups with {len(self.ready)} ready and {len(self.running)} running)"
            )
        for replica in self.replicas:
            replica.close_accounts()
        return self
