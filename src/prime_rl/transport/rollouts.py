"""How each step's packed batches (prime_rl.transport.batch, one per trainer rank) travel from the orchestrator to
the trainer: one small interface, a sender on the orchestrator and a receiver on every trainer rank, with one
implementation per `rollout_transport.type` (config/rollout_transport.py), registered in `TRANSPORTS`:

- `filesystem` (prime_rl.transport.fs_rollouts): `rollouts/step_N/rank_R.bin` in the run directory;
- `tcp` (prime_rl.transport.zmq_rollouts): the same msgpack bytes over ZMQ, the trainer asking for each step.

Contract of every implementation: the trainer rank R receives step N's batch for rank R, whole and once per ask;
`send` of step N returns once the batch is handed over (written, or held for the trainer) and may wait while the
trainer is more than `max_async_level + 1` steps behind (`tcp`; the filesystem path is bounded by the scheduler's
wait for policy versions alone); `drain(N)` returns once the trainer took every step up to N.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from pathlib import Path

from prime_rl.config.rollout_transport import RolloutTransportConfig
from prime_rl.transport.batch import StepBatch

# rollout_transport.type -> (module, sender class, receiver class); imported on use (pyzmq only for tcp)
TRANSPORTS: dict[str, tuple[str, str, str]] = {
    "filesystem": ("prime_rl.transport.fs_rollouts", "FileSender", "FileReceiver"),
    "tcp": ("prime_rl.transport.zmq_rollouts", "ZmqSender", "ZmqReceiver"),
}


class RolloutTransportError(RuntimeError):
    """The other side of the rollout transport refused a request (the message says why and what to change)."""


class RolloutSender(ABC):
    """The orchestrator's side. Use `serve` as a background task for the whole run, `send` once per step in order,
    `drain` after the last step, then `aclose`."""

    async def serve(self) -> None:
        """Answer the trainer until cancelled (a transport the trainer only reads from returns at once)."""
        return None

    @abstractmethod
    async def send(self, step: int, batches: list[StepBatch]) -> None:
        """Hand over step `step`'s batches, `batches[R]` for trainer rank R.

        Raises:
            TimeoutError: (tcp) the trainer did not come within `max_async_level + 1` steps of `step` in time."""

    async def drain(self, last_step: int, timeout_s: float) -> None:
        """Wait until the trainer took every step up to `last_step` (TimeoutError after `timeout_s` seconds)."""
        return None

    async def aclose(self) -> None:
        """Release sockets and files (idempotent)."""
        return None


class RolloutReceiver(ABC):
    """One trainer rank's side."""

    @abstractmethod
    def receive(self, step: int, keep_from: int) -> StepBatch:
        """Step `step`'s batch for this rank. `keep_from` is the lowest step this rank may ask for again after a
        restart (its newest checkpoint's step + 1): the sender may forget the steps before it.

        Raises:
            TimeoutError: nothing arrived within the trainer's `data_timeout_s` (names where it waited).
            RolloutTransportError: the sender refused the request (a released step, a wrong world size, tcp: a
                missing or wrong `rollout_transport.token`).
            BatchFormatError: the bytes are not a batch."""

    @abstractmethod
    def source(self, step: int) -> str:
        """Where step `step`'s batch comes from, for messages (a path or an address)."""

    def finish(self, last_step: int) -> None:
        """Tell the sender that this rank took every step up to `last_step` and needs no more.

        Raises:
            RolloutTransportError: the sender refused it (tcp: a missing or wrong `rollout_transport.token`)."""
        return None

    def close(self) -> None:
        """Release sockets (idempotent)."""
        return None


def _classes(cfg: RolloutTransportConfig) -> tuple[type, type]:
    module, sender, receiver = TRANSPORTS[cfg.type]
    mod = importlib.import_module(module)
    return getattr(mod, sender), getattr(mod, receiver)


def build_sender(cfg: RolloutTransportConfig, run_dir: Path, *, num_ranks: int, max_async_level: int,
                 start_step: int, timeout_s: float) -> RolloutSender:  # fmt: skip
    """The orchestrator's sender for `cfg.type`: `num_ranks` trainer ranks, the first step sent is `start_step`,
    `timeout_s` bounds each wait for the trainer. Raises RolloutTransportError when it cannot listen (tcp: a taken
    port)."""
    return _classes(cfg)[0](cfg, Path(run_dir), num_ranks=num_ranks, max_async_level=max_async_level,
                            start_step=start_step, timeout_s=timeout_s)  # fmt: skip


def build_receiver(cfg: RolloutTransportConfig, run_dir: Path, *, rank: int, world_size: int,
                   timeout_s: float) -> RolloutReceiver:  # fmt: skip
    """Trainer rank `rank` (of `world_size`)'s receiver for `cfg.type`; each receive waits up to `timeout_s`."""
    return _classes(cfg)[1](cfg, Path(run_dir), rank=rank, world_size=world_size, timeout_s=timeout_s)
