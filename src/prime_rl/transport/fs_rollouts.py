"""`rollout_transport.type = "filesystem"`: the orchestrator writes `rollouts/step_N/rank_R.bin` atomically
(docs/design.md invariant 4) into the run directory, and trainer rank R waits for its file. Across nodes the run
directory must be a shared filesystem. The orchestrator runs ahead of the trainer only as far as the scheduler's
wait for policy versions lets it (`max_async_level`); files are never deleted by the transport."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prime_rl.config.rollout_transport import RolloutTransportConfig
from prime_rl.monitor.rundir import RunDir
from prime_rl.transport.batch import StepBatch, wait_for_batch, write_batch
from prime_rl.transport.rollouts import RolloutReceiver, RolloutSender


def write_rank_files(run_dir: Path, step: int, batches: list[StepBatch]) -> list[Path]:
    """Write `rollouts/step_<step>/rank_R.bin` for each batch atomically; returns the paths."""
    run = RunDir(run_dir)
    paths = []
    for batch in batches:
        path = run.rollout_file(step, batch.rank)
        write_batch(path, batch)
        paths.append(path)
    return paths


class FileSender(RolloutSender):
    """Writes each step's rank files in a worker thread (the event loop keeps running rollouts meanwhile)."""

    def __init__(self, cfg: RolloutTransportConfig, run_dir: Path, **_: object):
        self.run_dir = Path(run_dir)

    async def send(self, step: int, batches: list[StepBatch]) -> None:
        await asyncio.to_thread(write_rank_files, self.run_dir, step, batches)


class FileReceiver(RolloutReceiver):
    """Waits for `rollouts/step_N/rank_R.bin` (polled; `data_timeout_s` at most) and reads it."""

    def __init__(self, cfg: RolloutTransportConfig, run_dir: Path, *, rank: int, world_size: int, timeout_s: float):
        self.run, self.rank, self.timeout_s = RunDir(Path(run_dir)), rank, timeout_s

    def receive(self, step: int, keep_from: int) -> StepBatch:
        return wait_for_batch(self.source_path(step), self.timeout_s)

    def source_path(self, step: int) -> Path:
        return self.run.rollout_file(step, self.rank)

    def source(self, step: int) -> str:
        return str(self.source_path(step))
