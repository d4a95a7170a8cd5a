"""Rollout workers: the agent loop of train rollouts in `orchestrator.workers.count` processes.

With `count = 0` (the default) the scheduler plays every rollout in the orchestrator process. With N > 0 the
orchestrator spawns N worker processes (prime_rl.orchestrator.worker_main) that each build their own inference
backend, renderer and train sources from the orchestrator's config; the scheduler stays the one in the orchestrator
process and decides everything that makes a step exact: which task each group plays (the task stream), when a
group may start (the staleness bound of `max_async_level`, `max_inflight`, the sources' capacities, shared with
eval), which finished groups are dropped as stale or rejected by the gate and which make the step, admission,
packing and the checkpoint's outstanding groups. A worker only plays: each rollout is a job sent over a ZeroMQ
socket (ipc, in a private temporary directory) and comes back as a msgpack result (prime_rl.orchestrator.worker_wire)
that the scheduler collects as it would an in-process rollout. A group's rollouts go to one worker (the least
loaded when its first rollout starts), so `client.parallel_sampling` can still merge their first turns.

Failures stop the run, never silently: a worker that exits while the run needs it (a crash, a kill, the OOM killer)
makes the next `Scheduler.next_batch` raise `WorkerDied` naming the worker, its pid, its exit code or signal and the
rollouts it had in flight. Its in-flight groups are not replayed in the run: the run stops (exit 1), and a resume
from the last checkpoint plays again every group that was drawn but not trained on (`TaskStream.state_dict`'s
replay list). A worker that cannot start (`fatal`: its sources or backend failed), or that is not ready within
`workers.start_timeout_s`, stops the run the same way before any rollout; a job a worker could not play (a task list
that differs from the scheduler's) fails its group (`AdmissionError` naming it).

Limits: eval rollouts and the teacher's scoring stay in the orchestrator process; the workers are daemonic (they
cannot start processes through multiprocessing themselves; subprocesses are fine); every source's train task list
must be the same in every process (checked per job by task id).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from prime_rl.config.orchestrator import OrchestratorConfig, SamplingConfig
from prime_rl.envs.base import Task
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.agent import AgentLimits
from prime_rl.orchestrator.types import Rollout
from prime_rl.orchestrator.worker_main import worker_main
from prime_rl.orchestrator.worker_wire import Job, pack, rollout_from_wire, unpack

log = get_logger("orchestrator.workers")

REAP_TIMEOUT_S = 5.0  # how long to wait for the exit code of a worker whose process is ending
STOP_TIMEOUT_S = 10.0  # how long a worker may take to close its episodes after `stop` before it is killed


class WorkerError(RuntimeError):
    """A rollout worker failed: it could not start, or a job it was sent could not be played."""


class WorkerDied(WorkerError):
    """A rollout worker process exited while the run needed it."""


def exit_text(code: int | None) -> str:
    """`exit code 3` or `signal SIGKILL` for a process's `exitcode` (negative: killed by that signal)."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class WorkerPool:
    """The orchestrator's side of the rollout workers (see the module docstring).

    Args:
        cfg: the orchestrator config (`workers.count`, `workers.start_timeout_s`; each worker builds from it).
        runtime: `package.module:function` that builds a worker's backend, renderer and sources
            (`worker_main.WorkerRuntime`); None = from the config as the `orchestrator` command does.

    `listeners` are called once with the first failure (the scheduler stops on it).
    """

    def __init__(self, cfg: OrchestratorConfig, runtime: str | None = None):
        self.cfg, self.runtime, self.count = cfg, runtime, cfg.workers.count
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self.pids: list[int] = []
        self.load = [0] * self.count  # rollouts in flight per worker
        self.pending: dict[str, tuple[int, asyncio.Future, Task]] = {}
        self.group_worker: dict[int, list[int]] = {}  # group id -> [worker, its rollouts in flight]
        self.failure: BaseException | None = None
        self.listeners: list[Callable[[BaseException], None]] = []
        self._ready: set[int] = set()
        self._changed = asyncio.Event()
        self._sampling: dict[int, tuple[SamplingConfig, bytes]] = {}
        self._closing = False
        self._dir: str | None = None
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._receiver: asyncio.Task | None = None

    # ---- start ----
    async def start(self) -> None:
        """Spawn the workers and wait until every one is ready.

        Raises:
            WorkerError: a worker could not start (its reason), or exited while starting (`WorkerDied`).
            TimeoutError: not every worker was ready within `workers.start_timeout_s`.
        """
        loop = asyncio.get_running_loop()
        self._dir = tempfile.mkdtemp(prefix="prime-rl-workers-")
        endpoint = f"ipc://{self._dir}/jobs"
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a job for a worker that is not connected raises
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(endpoint)
        self._receiver = asyncio.create_task(self._receive(), name="rollout-workers")
        self._receiver.add_done_callback(self._receiver_done)
        spawn = multiprocessing.get_context("spawn")
        for index in range(self.count):
            proc = spawn.Process(target=worker_main, name=f"rollout-worker-{index}", daemon=True,
                                 args=(index, endpoint, self.cfg, self.runtime, os.getpid()))  # fmt: skip
            proc.start()
            self.procs.append(proc)
            self.pids.append(proc.pid)
            loop.add_reader(proc.sentinel, self._exited, index)
        deadline = loop.time() + self.cfg.workers.start_timeout_s
        while len(self._ready) < self.count and self.failure is None:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                waiting = sorted(set(range(self.count)) - self._ready)
                raise TimeoutError(
                    f"rollout worker(s) {waiting} not ready after {self.cfg.workers.start_timeout_s:.0f} s "
                    "(orchestrator.workers.start_timeout_s): building their sources and backend takes longer, or "
                    "they hang; see the orchestrator's stderr"
                ) from None
        if self.failure is not None:
            raise self.failure
        log.info("%d rollout worker(s) ready (pids %s)", self.count, ", ".join(map(str, self.pids)))

    # ---- playing ----
    def _sampling_bytes(self, sampling: SamplingConfig) -> bytes:
        cached = self._sampling.get(id(sampling))
        if cached is None or cached[0] is not sampling:
            cached = self._sampling[id(sampling)] = (sampling, pack(sampling.model_dump(mode="json")))
        return cached[1]

    def _assign(self, group_id: int) -> int:
        entry = self.group_worker.get(group_id)
        if entry is None:
            worker = min(range(self.count), key=self.load.__getitem__)
            entry = self.group_worker[group_id] = [worker, 0]
        entry[1] += 1
        return entry[0]

    def _release(self, group_id: int, worker: int) -> None:
        self.load[worker] -= 1
        entry = self.group_worker[group_id]
        entry[1] -= 1
        if entry[1] == 0:
            del self.group_worker[group_id]

    async def play(self, task: Task, source_idx: int, task_pos: int, sampling: SamplingConfig, limits: AgentLimits,
                   *, rollout_id: str, group_id: int, policy_version: int) -> Rollout:  # fmt: skip
        """Play one rollout of train task `task` (source `source_idx`, position `task_pos` of its train split) on
        a worker; the finished rollout, with `task` as its task.

        Raises:
            WorkerError: the worker could not play it, or the pool failed (`WorkerDied`: a worker exited).
            asyncio.CancelledError: cancelled; the worker is told to cancel the rollout (closing its episode).
        """
        if self.failure is not None:
            raise self.failure
        if self._closing:
            raise WorkerError("the rollout workers are stopping")
        worker = self._assign(group_id)
        self.load[worker] += 1
        future = asyncio.get_running_loop().create_future()
        self.pending[rollout_id] = (worker, future, task)
        job = Job(rollout_id, group_id, source_idx, task_pos, task.task_id, self._sampling_bytes(sampling),
                  [limits.seq_len, limits.max_completion_tokens, *limits.reward_range], policy_version)  # fmt: skip
        try:
            await self._sock.send_multipart([f"w{worker}".encode(), pack(["play", job.to_wire()])])
            return await future
        except asyncio.CancelledError:
            if not future.done():
                self._send_nowait(worker, ["cancel", rollout_id])
            raise
        except zmq.ZMQError as e:
            raise WorkerError(f"rollout worker {worker}: sending {rollout_id} failed: {e}") from e
        finally:
            self.pending.pop(rollout_id, None)
            self._release(group_id, worker)

    def _send_nowait(self, worker: int, message: list[Any]) -> None:
        """Best effort (a worker that is gone or stopping needs no cancel)."""
        if self._sock is None or self._sock.closed:
            return

        def sent(result: asyncio.Future) -> None:
            if not result.cancelled() and result.exception() is not None:
                log.debug("message %s to rollout worker %d not sent: %s", message[0], worker, result.exception())

        try:  # the asyncio socket reports a failed send on the future it returns
            self._sock.send_multipart([f"w{worker}".encode(), pack(message)], flags=zmq.NOBLOCK).add_done_callback(sent)
        except zmq.ZMQError as e:
            log.debug("message %s to rollout worker %d not sent: %s", message[0], worker, e)

    async def _receive(self) -> None:
        while True:
            identity, payload = await self._sock.recv_multipart()
            worker, message = int(identity[1:]), unpack(payload)
            kind = message[0]
            if kind == "ready":
                self._ready.add(worker)
                self._changed.set()
            elif kind == "fatal":
                self._fail(WorkerError(f"rollout worker {worker} (pid {self.pids[worker]}) could not start: "
                                       f"{message[1]}"))  # fmt: skip
            elif kind in ("result", "error"):
                entry = self.pending.get(message[1])
                if entry is None or entry[1].done():
                    continue  # cancelled meanwhile
                future, task = entry[1], entry[2]
                if kind == "error":
                    future.set_exception(WorkerError(f"rollout worker {worker} could not play {message[1]}: "
                                                     f"{message[2]}"))  # fmt: skip
                    continue
                try:
                    future.set_result(rollout_from_wire(message[2], task, worker))
                except (ValueError, TypeError) as e:
                    future.set_exception(WorkerError(f"rollout worker {worker} sent {message[1]} malformed: {e}"))
            else:
                raise WorkerError(f"unknown message {kind!r} from rollout worker {worker}")

    def _receiver_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None and not self._closing:
            error = task.exception()
            self._fail(
                error
                if isinstance(error, WorkerError)
                else WorkerError(f"receiving from the rollout workers failed: {type(error).__name__}: {error}")
            )

    # ---- failures ----
    def _exited(self, index: int) -> None:
        proc = self.procs[index]
        asyncio.get_running_loop().remove_reader(proc.sentinel)
        proc.join(REAP_TIMEOUT_S)  # its sentinel closed: it is exiting, reaped within milliseconds
        if self._closing:
            return
        inflight = sorted(rid for rid, (worker, _, _) in self.pending.items() if worker == index)
        shown = ", ".join(inflight[:4]) + (f", ... ({len(inflight)} in all)" if len(inflight) > 4 else "")
        self._fail(WorkerDied(
            f"rollout worker {index} (pid {proc.pid}) exited with {exit_text(proc.exitcode)} while the run needed it, "
            f"{len(inflight)} rollout(s) in flight{' (' + shown + ')' if inflight else ''}: the run stops (its groups "
            "are not replayed in this run; resuming from the last checkpoint plays every group not yet trained on)"
        ))  # fmt: skip

    def _fail(self, error: BaseException) -> None:
        """Keep the first failure, tell the listeners, then fail the rollouts waiting on any worker."""
        if self.failure is not None:
            return
        self.failure = error
        log.error("%s", error)
        for listener in self.listeners:
            listener(error)
        for _, future, _ in list(self.pending.values()):
            if not future.done():
                future.set_exception(error)
        self._changed.set()

    # ---- shutdown ----
    async def aclose(self) -> None:
        """Stop every worker (`stop`: it cancels its rollouts and closes its episodes), kill one that has not
        exited after STOP_TIMEOUT_S, and release the socket. Idempotent."""
        if self._closing:
            return
        self._closing = True
        for future in [f for _, f, _ in self.pending.values() if not f.done()]:
            future.cancel()
        for index, proc in enumerate(self.procs):
            if proc.exitcode is None:
                self._send_nowait(index, ["stop"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_TIMEOUT_S
        for index, proc in enumerate(self.procs):
            await asyncio.to_thread(proc.join, max(0.0, deadline - loop.time()))
            if proc.exitcode is None:
                log.warning("rollout worker %d (pid %d) did not stop within %.0f s: killed", index, proc.pid,
                            STOP_TIMEOUT_S)  # fmt: skip
                proc.kill()
                await asyncio.to_thread(proc.join, STOP_TIMEOUT_S)
            elif proc.exitcode != 0 and self.failure is None:
                log.warning("rollout worker %d (pid %d) stopped with %s", index, proc.pid, exit_text(proc.exitcode))
            try:
                loop.remove_reader(proc.sentinel)
            except (ValueError, OSError):
                pass  # closed already
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
        if self._sock is not None:
            self._sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
