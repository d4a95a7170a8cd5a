"""A rollout worker process: plays the rollouts the scheduler sends (prime_rl.orchestrator.workers).

The worker builds its own inference backend, renderer and train sources from the orchestrator's config (or with
the runtime builder named by an import path, `package.module:function`, for tests and benchmarks), starts the
sources, says `ready`, then plays every `play` job as a task of its event loop with the agent loop
(`prime_rl.orchestrator.agent.run_rollout`) and sends each finished rollout back (prime_rl.orchestrator.worker_wire).
A `cancel` cancels one rollout (its episode is closed); `stop`, the orchestrator process going away (checked every
second) or SIGTERM (after SIGTERM_GRACE_S, unless `stop` comes first: the orchestrator gets the same signal from a
process-group kill and stops its workers itself) cancels every running rollout, closes the sources and the backend
and exits 0. SIGINT is ignored, for the same reason. A worker that cannot start sends `fatal` with the reason and
exits 1.

Each job carries the policy version the orchestrator had loaded when it sent the job; the newest one a worker has
seen goes to the runtime's `on_policy_version`. The backend built from the config records it on the results of a
server that reports no version spans of its own (`InferenceClient.assume_policy_version`; prime-rl's vLLM server
reports the version every token was sampled with, which is recorded instead). Without it such a worker would record
version 0 forever and every group would be dropped as stale once the run passes `max_off_policy_steps`.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from prime_rl.config.orchestrator import OrchestratorConfig, SamplingConfig
from prime_rl.envs.base import Task
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.sources import TaskSource
from prime_rl.orchestrator.worker_wire import Job, pack, rollout_to_wire, unpack

log = get_logger("orchestrator.worker")

PARENT_CHECK_S = 1.0  # how often a worker checks that the orchestrator process still exists
SIGTERM_GRACE_S = 5.0  # how long a worker waits after SIGTERM for the orchestrator's `stop` before it stops itself


@dataclass
class WorkerRuntime:
    """What a worker plays rollouts with: the inference backend, the renderer and the train sources (in the order
    of `orchestrator.train.source`), and an optional hook that receives each job's policy version."""

    client: Any
    renderer: Any
    sources: list[TaskSource]
    on_policy_version: Callable[[int], None] | None = None
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        """Close the sources and whatever the builder registered in `closers` (the backend)."""
        for source in self.sources:
            await source.aclose()
        for close in self.closers:
            await close()


async def runtime_from_config(cfg: OrchestratorConfig, index: int) -> WorkerRuntime:
    """The runtime the `orchestrator` command's process builds for itself: the tokenizer and renderer of
    `cfg.model`, the backend of `cfg.backend` (waited healthy), `cfg.train.source`'s sources (started)."""
    from prime_rl.inference.backend import build_backend
    from prime_rl.models.renderer import load_tokenizer, make_renderer
    from prime_rl.orchestrator.sources import build_source

    tok = load_tokenizer(cfg.model.name, cfg.model.chat_template)
    client = build_backend(cfg)
    runtime = WorkerRuntime(client, make_renderer(tok, cfg.renderer), [build_source(s) for s in cfg.train.source],
                            on_policy_version=getattr(client, "assume_policy_version", None),
                            closers=[client.aclose])  # fmt: skip
    await client.wait_healthy()
    for source in runtime.sources:
        await source.start()
    return runtime


def resolve(path: str) -> Callable[..., Awaitable[WorkerRuntime]]:
    """The runtime builder `package.module:function` names.

    Raises:
        ValueError: `path` is not of that form, or the module has no such attribute.
    """
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"worker runtime {path!r}: expected package.module:function")
    builder = getattr(importlib.import_module(module), name, None)
    if builder is None:
        raise ValueError(f"worker runtime {path!r}: module {module} has no {name}")
    return builder


class _Player:
    """The worker's state: the runtime, the train tasks of every source, the rollouts running."""

    def __init__(self, runtime: WorkerRuntime, sock: zmq.asyncio.Socket):
        self.runtime, self.sock = runtime, sock
        self.tasks: list[list[Task]] = [s.tasks("train") for s in runtime.sources]
        self.running: dict[str, asyncio.Task] = {}
        self.sampling: dict[bytes, SamplingConfig] = {}
        self.version = -1  # the newest policy version a job carried

    def start(self, job: Job) -> None:
        self.running[job.rollout_id] = asyncio.create_task(self._play(job), name=job.rollout_id)

    async def _play(self, job: Job) -> None:
        try:
            rollout = await self._rollout(job)
            await self.sock.send(pack(["result", job.rollout_id, rollout_to_wire(rollout)]))
        except asyncio.CancelledError:
            pass  # the scheduler cancelled it: it expects no answer
        except Exception as e:  # a bug or a task list that differs: the scheduler stops the run naming it
            await self.sock.send(pack(["error", job.rollout_id, f"{type(e).__name__}: {e}"]))
        finally:
            self.running.pop(job.rollout_id, None)

    async def _rollout(self, job: Job):
        if job.source_idx >= len(self.tasks):
            raise ValueError(f"job names train source {job.source_idx}; this worker has {len(self.tasks)} source(s)")
        tasks, source = self.tasks[job.source_idx], self.runtime.sources[job.source_idx]
        task = tasks[job.task_pos] if job.task_pos < len(tasks) else None
        if task is None or task.task_id != job.task_id:
            raise ValueError(
                f"source {source.name!r} train task {job.task_pos} is {None if task is None else task.task_id!r} in "
                f"this worker, {job.task_id!r} in the scheduler: the source's task list is not the same in every "
                "process (it must be deterministic for orchestrator.workers.count > 0)"
            )
        sampling = self.sampling.get(job.sampling)
        if sampling is None:
            sampling = self.sampling[job.sampling] = SamplingConfig.model_validate(unpack(job.sampling))
        seq_len, max_tokens, low, high = job.limits
        limits = AgentLimits(int(seq_len), int(max_tokens), (low, high))
        if job.policy_version > self.version:
            self.version = job.policy_version
            if self.runtime.on_policy_version is not None:
                self.runtime.on_policy_version(job.policy_version)
        return await run_rollout(task, source, self.runtime.client, self.runtime.renderer, sampling, limits,
                                 rollout_id=job.rollout_id, group_id=job.group_id)  # fmt: skip

    async def aclose(self) -> None:
        running = list(self.running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def _serve(index: int, endpoint: str, cfg: OrchestratorConfig, runtime_path: str | None, parent: int) -> int:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, f"w{index}".encode())
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(endpoint)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGTERM usually reaches the whole process group: the orchestrator, stopping too, sends `stop` at once; a worker
    # signalled alone stops after SIGTERM_GRACE_S (and the orchestrator reports it)
    loop.add_signal_handler(signal.SIGTERM, lambda: loop.call_later(SIGTERM_GRACE_S, stop.set))
    runtime: WorkerRuntime | None = None
    try:
        try:
            builder = resolve(runtime_path) if runtime_path else runtime_from_config
            runtime = await builder(cfg, index)
            player = _Player(runtime, sock)
        except Exception as e:
            await sock.send(pack(["fatal", f"{type(e).__name__}: {e}"]))
            return 1
        gc.collect()  # as the orchestrator process does (main.tune_gc): the set-up heap out of the collector's walks
        gc.freeze()
        gc.set_threshold(max(gc.get_threshold()[0], 10_000), *gc.get_threshold()[1:])
        await sock.send(pack(["ready", os.getpid()]))
        watch = asyncio.create_task(_watch_parent(parent, stop))
        receiving = asyncio.create_task(_receive(sock, player, stop))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([receiving, stopping], return_when=asyncio.FIRST_COMPLETED)
        failed = receiving.done() and not receiving.cancelled() and receiving.exception() is not None
        for task in (watch, receiving, stopping):
            task.cancel()
        await asyncio.gather(watch, receiving, stopping, return_exceptions=True)
        await player.aclose()
        if failed:  # the exit code tells the orchestrator; the reason goes to stderr
            log.error("worker %d stops: %r", index, receiving.exception())
            return 1
        return 0
    finally:
        if runtime is not None:
            await runtime.aclose()
        sock.close()
        ctx.term()


async def _receive(sock: zmq.asyncio.Socket, player: _Player, stop: asyncio.Event) -> None:
    while not stop.is_set():
        message = unpack(await sock.recv())
        kind = message[0]
        if kind == "play":
            player.start(Job.from_wire(message[1]))
        elif kind == "cancel":
            if (task := player.running.get(message[1])) is not None:
                task.cancel()
        elif kind == "stop":
            stop.set()
            return
        else:
            raise ValueError(f"unknown message {kind!r} from the scheduler")


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_CHECK_S)
    log.warning("the orchestrator process %d is gone: stopping", parent)
    stop.set()


def worker_main(index: int, endpoint: str, cfg: OrchestratorConfig, runtime_path: str | None, parent: int) -> None:
    """Entry point of worker `index` (a spawned process): connect to `endpoint`, play jobs until stopped; exits with
    `_serve`'s code (0 stopped, 1 could not start)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(asyncio.run(_serve(index, endpoint, cfg, runtime_path, parent)))
