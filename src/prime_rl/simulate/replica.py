"""An inference replica under continuous batching (a vLLM server), as a processor-sharing queue.

Up to `peak_batch` requests are admitted at once; the others wait in arrival order. An admitted request is first
prefilled (`request_overhead_s`, then its new prompt tokens at `prefill_tokens_per_s`, one request at a time,
decoding held meanwhile), then
decoded together with every other admitted request: an iteration with b sequences takes `t(b) = t0 + t1 * b`
seconds and gives each one token. All decoding sequences advance alike, so the replica keeps one virtual clock
`V` (tokens per sequence since start) and a request finishes when `V` reaches its start value plus its tokens:
one event per request phase, never per token. A weight load pauses everything (`pause`/`resume`).

`t0`, `t1` from the config's two points: `t(1) = 1 / single_seq_tokens_per_s` and
`t(B) = B / peak_tokens_per_s` with `B = peak_batch`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prime_rl.config.plan import PlanInferenceConfig
from prime_rl.simulate.events import EventQueue


@dataclass
class Request:
    """One generate call: `prefill_tokens` new prompt tokens, then `decode_tokens` sampled ones. `on_done(version)`
    runs when the last token is out, with the oldest policy version that worked on it (its `version`)."""

    prefill_tokens: int
    decode_tokens: int
    on_done: Callable[[int], None]
    version: int = -1


def iteration_times(cfg: PlanInferenceConfig) -> tuple[float, float]:
    """`(t0, t1)` of the decode iteration time `t(b) = t0 + t1 * b` (seconds) from the config's two points."""
    peak_batch = cfg.peak_batch
    single = 1.0 / cfg.single_seq_tokens_per_s
    if peak_batch == 1:
        return single, 0.0
    t1 = (peak_batch / cfg.peak_tokens_per_s - single) / (peak_batch - 1)
    return single - t1, t1


class Replica:
    """One inference server on the event queue `q`; `version` is the policy version it serves now."""

    def __init__(self, idx: int, queue: EventQueue, cfg: PlanInferenceConfig):
        self.idx, self.q = idx, queue
        self.t0, self.t1 = iteration_times(cfg)
        self.max_seqs = cfg.peak_batch
        self.prefill_rate = cfg.prefill_tokens_per_s
        self.overhead = cfg.request_overhead_s
        self.version = 0
        self.paused = False
        self.V = 0.0
        self.last = 0.0
        self.waiting: deque[Request] = deque()
        self.prefilling: deque[Request] = deque()
        self.prefill_left = 0.0
        self.active: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        self._gen = 0
        # accounting (seconds): sampling or prefilling, paused for a weight load; sequence-seconds decoding
        self.busy_s = 0.0
        self.load_s = 0.0
        self.seq_s = 0.0
        self.tokens = 0

    @property
    def outstanding(self) -> int:
        """Requests waiting, prefilling or decoding (what the client balances on)."""
        return len(self.waiting) + len(self.prefilling) + len(self.active)

    def iteration_s(self, batch_size: int) -> float:
        """Seconds of one decode iteration with `batch_size` sequences."""
        return self.t0 + self.t1 * batch_size

    # ---- state advance ----
    def _advance(self) -> None:
        now = self.q.now
        dt = now - self.last
        self.last = now
        if dt <= 0:
            return
        if self.paused:
            self.load_s += dt
        elif self.prefilling:
            self.prefill_left = max(0.0, self.prefill_left - dt)
            self.busy_s += dt
        elif self.active:
            num_active = len(self.active)
            self.V += dt / self.iteration_s(num_active)
            self.busy_s += dt
            self.seq_s += num_active * dt

    def _schedule(self) -> None:
        self._gen += 1
        if self.paused:
            return
        if self.prefilling:
            dt = self.prefill_left
        elif self.active:
            dt = max(0.0, self.active[0][0] - self.V) * self.iteration_s(len(self.active))
        else:
            return
        gen = self._gen
        self.q.after(dt, lambda: self._fire(gen))

    def _admit(self) -> None:
        while self.waiting and len(self.prefilling) + len(self.active) < self.max_seqs:
            req = self.waiting.popleft()
            if not self.prefilling:
                self._start_prefill(req)
            self.prefilling.append(req)

    def _start_prefill(self, req: Request) -> None:
        req.version = self.version
        self.prefill_left = self.overhead + req.prefill_tokens / self.prefill_rate

    def _fire(self, gen: int) -> None:
        if gen != self._gen:
            return
        self._advance()
        done: list[Request] = []
        if self.prefilling:
            if self.prefill_left <= 1e-12:
                req = self.prefilling.popleft()
                heapq.heappush(self.active, (self.V + req.decode_tokens, next(self._seq), req))
                if self.prefilling:
                    self._start_prefill(self.prefilling[0])
        else:
            eps = 1e-9 * max(1.0, self.V)
            while self.active and self.active[0][0] - self.V <= eps:
                done.append(heapq.heappop(self.active)[2])
        self._admit()
        self._schedule()
        for req in done:
            self.tokens += req.decode_tokens
            req.on_done(req.version)

    # ---- API ----
    def submit(self, req: Request) -> None:
        """Queue a request (admitted at once when a slot is free)."""
        self._advance()
        if req.decode_tokens <= 0 and req.prefill_tokens <= 0:
            raise ValueError("a request needs prompt or sampled tokens")
        self.waiting.append(req)
        self._admit()
        self._schedule()

    def pause(self) -> None:
        """Stop sampling (a weight load begins)."""
        self._advance()
        self.paused = True
        self._schedule()

    def resume(self, version: int) -> None:
        """Sample again, now with policy `version`."""
        self._advance()
        self.paused = False
        self.version = version
        self._schedule()

    def close_accounts(self) -> None:
        """Bring the busy/idle counters up to the clock."""
        self._advance()
