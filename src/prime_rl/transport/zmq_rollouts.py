"""`rollout_transport.type = "tcp"`: the orchestrator holds each step's batches and answers the trainer ranks over
ZMQ (pyzmq); no rollout file is written or read, so the trainer nodes need no filesystem shared with the
orchestrator's.

Protocol (request/reply; every request and reply header is a msgpack map):

- trainer rank R (a REQ socket connected to `rollout_transport.host:port`) asks
  `{"op": "get", "step": N, "rank": R, "world_size": W, "keep_from": K}`; the orchestrator (a ROUTER socket bound
  there) answers `[{"status": "ok", "step": N}, batch bytes]` once step N exists (the bytes of
  `rollouts/step_N/rank_R.bin`, prime_rl.transport.batch), or `[{"status": "error", "message": ...}]`;
- `{"op": "done", "step": N, "rank": R}` after the rank's last step, answered `[{"status": "ok"}]`;
- `{"op": "published", "step": N, "rank": 0}` from trainer rank 0 once policy version N is ready to go out over the
  weight group (`weight_transport.type = "collective"`), answered `[{"status": "ok"}]`: the orchestrator's weight
  watcher follows these announcements (`ZmqSender.published`) instead of `weights/step_N/STABLE`, so no node reads
  another node's run directory.

With a shared secret (`rollout_transport.token`, or PRIME_RL_ROLLOUT_TOKEN) every request also carries
`"token": T`; the orchestrator answers a request without it, or with another, `[{"status": "error", ...}]` and
changes nothing (compared in constant time, `hmac.compare_digest`).

Asking for step N confirms steps < N; `done` confirms N. K is the lowest step the rank may ask for again after a
restart (its newest checkpoint's step + 1, or N when it keeps no checkpoints): the orchestrator keeps every step
from the lowest K of all ranks on, and forgets older ones. A trainer restarted from checkpoint step C therefore
asks for C + 1 and gets it, and every later step, each once: steps are only ever served by the trainer's ask,
which names the step. Back-pressure: `send(N)` waits while some rank has not yet asked for step
N - max_async_level - 1 (the orchestrator is never more than `max_async_level + 1` steps ahead of what the trainer
took, the bound the scheduler's policy versions already give). An unanswered ask is sent again every `RESEND_S`
(the REQ socket is relaxed and correlated: only the newest ask's answer is read), so an orchestrator restarted
from its checkpoint gets the asks again.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from prime_rl.config.rollout_transport import ENV_TOKEN, RolloutTransportConfig
from prime_rl.monitor.logger import get_logger
from prime_rl.transport.batch import StepBatch, decode_batch, encode_batch
from prime_rl.transport.rollouts import RolloutReceiver, RolloutSender, RolloutTransportError

log = get_logger("transport.tcp")

RESEND_S = 10.0  # an unanswered ask is repeated after this many seconds (a restarted orchestrator hears it)


def _pack(obj: dict[str, Any]) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


class ZmqSender(RolloutSender):
    """The orchestrator's side: binds a ROUTER socket at `cfg.endpoint` when built and answers in `serve`."""

    def __init__(self, cfg: RolloutTransportConfig, run_dir: Path, *, num_ranks: int, max_async_level: int,
                 start_step: int, timeout_s: float):  # fmt: skip
        self.endpoint, self.num_ranks, self.token = cfg.endpoint, num_ranks, cfg.secret()
        self.ahead, self.start_step, self.timeout_s = max_async_level + 1, start_step, timeout_s
        self.batches: dict[int, list[bytes]] = {}  # step -> encoded batch of each rank
        self.asked: dict[int, int] = {}  # rank -> the step it asked for last
        self.done: dict[int, int] = {}  # rank -> the last step it confirmed with `done`
        self.keep_from: dict[int, int] = {}  # rank -> lowest step it may ask for again
        self.waiting: dict[int, tuple[list[bytes], int]] = {}  # rank -> (envelope, step) of an ask not answered yet
        self.published = 0  # the newest policy version trainer rank 0 announced (`op: published`; 0: none yet)
        self.released = start_step - 1  # steps up to this one are forgotten (or were never made here)
        self.changed = asyncio.Condition()
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        try:
            self.sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            self.sock.close(0)
            self.ctx.term()
            raise RolloutTransportError(
                f"rollout_transport: cannot listen on {self.endpoint} ({e}); choose a free rollout_transport.port or "
                "the address of this machine as rollout_transport.host"
            ) from e
        self.closed = False
        log.info("rollouts over tcp: listening on %s for %d trainer rank(s)", self.endpoint, num_ranks)

    # ---- state ----
    def taken(self, rank: int) -> int:
        """The last step rank `rank` confirmed (asked for the next one, or `done`)."""
        return max(self.asked.get(rank, self.start_step) - 1, self.done.get(rank, self.start_step - 1))

    def frontier(self) -> int:
        """The last step every rank confirmed."""
        return min(self.taken(r) for r in range(self.num_ranks))

    def _release(self) -> None:
        floor = min(self.frontier() + 1, *(self.keep_from.get(r, self.start_step) for r in range(self.num_ranks)))
        for step in [s for s in self.batches if s < floor]:
            del self.batches[step]
        self.released = max(self.released, floor - 1)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _wait(self, pred: Any, timeout_s: float, what: str) -> None:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(pred), timeout_s)
            except TimeoutError:
                taken = {r: self.taken(r) for r in range(self.num_ranks)}
                raise TimeoutError(
                    f"rollouts over tcp ({self.endpoint}): {what} for {timeout_s:.0f} s (last step taken per trainer "
                    f"rank: {taken}); is the trainer running and pointed at rollout_transport.host/port? see "
                    "logs/trainer.log"
                ) from None

    # ---- orchestrator API ----
    async def send(self, step: int, batches: list[StepBatch]) -> None:
        if sorted(b.rank for b in batches) != list(range(self.num_ranks)):
            raise ValueError(f"step {step}: batches for ranks {[b.rank for b in batches]}, expected 0..{self.num_ranks - 1}")
        await self._wait(lambda: step - self.frontier() <= self.ahead, self.timeout_s,
                         f"step {step} waited for the trainer to take step {step - self.ahead}")  # fmt: skip
        encoded = await asyncio.to_thread(lambda: [encode_batch(b) for b in sorted(batches, key=lambda b: b.rank)])
        self.batches[step] = encoded
        for rank, (envelope, want) in list(self.waiting.items()):
            if want == step:
                del self.waiting[rank]
                await self._reply(envelope, {"status": "ok", "step": step}, encoded[rank])

    async def drain(self, last_step: int, timeout_s: float) -> None:
        await self._wait(lambda: self.frontier() >= last_step, timeout_s,
                         f"the orchestrator's last step {last_step} was not taken by every rank")  # fmt: skip

    async def serve(self) -> None:
        while True:
            frames = await self.sock.recv_multipart()
            try:
                split = frames.index(b"") + 1
            except ValueError:
                log.warning("rollouts over tcp: dropped a message without an envelope (%d frames)", len(frames))
                continue
            envelope, body = frames[:split], frames[split:]
            try:
                req = msgpack.unpackb(body[0], raw=False) if body else None
            except Exception:  # msgpack raises several types
                req = None
            if not isinstance(req, dict) or req.get("op") not in ("get", "done", "published"):
                await self._reply(envelope, {"status": "error", "message": "not a prime-rl rollout request"})
                continue
            if not self._authorized(req.get("token")):
                await self._reply(envelope, {"status": "error", "message": (
                    "missing or wrong rollout_transport.token: give the trainer the orchestrator's token "
                    f"(rollout_transport.token or {ENV_TOKEN})")})  # fmt: skip
                continue
            await self._handle(envelope, req)
            self._release()
            await self._notify()

    def _authorized(self, given: Any) -> bool:
        """Whether a request carrying `given` may be served (always, without a configured token)."""
        if self.token is None:
            return True
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self.token.encode())

    async def _handle(self, envelope: list[bytes], req: dict[str, Any]) -> None:
        try:
            rank, step = int(req.get("rank", -1)), int(req.get("step", 0))
            world = int(req.get("world_size", self.num_ranks))
            keep_from = int(req.get("keep_from", step))
        except (TypeError, ValueError):  # a malformed request is answered, never allowed to stop the run
            await self._reply(envelope, {"status": "error", "message": "rank, step, world_size and keep_from must be "
                                         "integers"})  # fmt: skip
            return
        if not 0 <= rank < self.num_ranks or world != self.num_ranks:
            await self._reply(envelope, {"status": "error", "message": (
                f"trainer rank {rank} of world {req.get('world_size')} asked, but orchestrator.num_train_ranks = "
                f"{self.num_ranks}: it must equal the trainer's process count")})  # fmt: skip
            return
        if req["op"] == "published":
            if rank != 0 or step < 1:
                await self._reply(envelope, {"status": "error", "message": "only trainer rank 0 announces policy "
                                             f"versions >= 1 (got rank {rank}, version {step})"})  # fmt: skip
                return
            self.published = max(self.published, step)
            await self._reply(envelope, {"status": "ok", "step": step})
            return
        if req["op"] == "done":
            self.done[rank] = max(self.done.get(rank, 0), step)
            self.waiting.pop(rank, None)
            await self._reply(envelope, {"status": "ok", "step": step})
            return
        self.asked[rank] = step
        self.keep_from[rank] = min(keep_from, step)
        if step in self.batches:
            self.waiting.pop(rank, None)
            await self._reply(envelope, {"status": "ok", "step": step}, self.batches[step][rank])
        elif step <= self.released:
            self.waiting.pop(rank, None)
            await self._reply(envelope, {"status": "error", "message": (
                f"step {step} is no longer held by the orchestrator (it keeps steps from the trainer's newest "
                f"checkpoint on; it holds {sorted(self.batches) or 'none'}, started at step {self.start_step}): "
                "resume the trainer from its newest checkpoint, or resume the whole run with rl --resume")})  # fmt: skip
        else:
            self.waiting[rank] = (envelope, step)

    async def _reply(self, envelope: list[bytes], header: dict[str, Any], payload: bytes | None = None) -> None:
        frames = [*envelope, _pack(header)] + ([payload] if payload is not None else [])
        await self.sock.send_multipart(frames, copy=payload is None or len(payload) < 65536)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()
            self.ctx.term()


class ZmqReceiver(RolloutReceiver):
    """Trainer rank R's side: a REQ socket (relaxed, correlated) connected to `cfg.endpoint`."""

    def __init__(self, cfg: RolloutTransportConfig, run_dir: Path, *, rank: int, world_size: int, timeout_s: float):
        self.endpoint, self.rank, self.world_size, self.timeout_s = cfg.endpoint, rank, world_size, timeout_s
        self.token = cfg.secret()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.setsockopt(zmq.REQ_RELAXED, 1)
        self.sock.setsockopt(zmq.REQ_CORRELATE, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(self.endpoint)
        self.closed = False

    def source(self, step: int) -> str:
        return f"{self.endpoint} (step {step}, rank {self.rank})"

    def _ask(self, req: dict[str, Any], timeout_s: float) -> list[bytes]:
        body = _pack({**req, "token": self.token} if self.token is not None else req)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"no answer from the orchestrator at {self.endpoint} to {req['op']} step {req['step']} (rank "
                    f"{self.rank}) after {timeout_s:.0f} s: is the orchestrator running with rollout_transport.type = "
                    "'tcp' on that host and port? see logs/orchestrator.log"
                )
            self.sock.send(body)
            if self.sock.poll(int(min(RESEND_S, left) * 1000)):
                return self.sock.recv_multipart()

    def receive(self, step: int, keep_from: int) -> StepBatch:
        frames = self._ask({"op": "get", "step": step, "rank": self.rank, "world_size": self.world_size,
                            "keep_from": keep_from}, self.timeout_s)  # fmt: skip
        header = msgpack.unpackb(frames[0], raw=False)
        if header.get("status") != "ok" or len(frames) < 2:
            raise RolloutTransportError(f"{self.source(step)}: {header.get('message', header)}")
        return decode_batch(frames[1], source=self.source(step))

    def finish(self, last_step: int) -> None:
        frames = self._ask({"op": "done", "step": last_step, "rank": self.rank}, self.timeout_s)
        header = msgpack.unpackb(frames[0], raw=False)
        if header.get("status") != "ok":
            raise RolloutTransportError(f"{self.endpoint} (done, step {last_step}, rank {self.rank}): "
                                        f"{header.get('message', header)}")  # fmt: skip

    def announce(self, version: int) -> None:
        """Rank 0: tell the orchestrator that policy version `version` is ready to go out over the weight group
        (`op: published`). Raises RolloutTransportError when refused, TimeoutError without an answer."""
        frames = self._ask({"op": "published", "step": int(version), "rank": self.rank, "world_size": self.world_size},
                           self.timeout_s)  # fmt: skip
        header = msgpack.unpackb(frames[0], raw=False)
        if header.get("status") != "ok":
            raise RolloutTransportError(f"{self.endpoint} (published, version {version}, rank {self.rank}): "
                                        f"{header.get('message', header)}")  # fmt: skip

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close(0)
            self.ctx.term()
