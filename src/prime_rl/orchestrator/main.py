"""`orchestrator @ config`: plays rollouts, scores groups, hands each step's packed batches to the trainer
(`rollouts/step_N/rank_R.bin`, or over TCP: `rollout_transport`, prime_rl.transport.rollouts), follows its policy
versions, evaluates, checkpoints.

Per step N (from 1, or from a checkpoint's step + 1): wait for `batch_size` rollouts (scheduler), pack their
samples (masked rollouts carry no tokens; zero-advantage groups too with `advantage.filter_zero`), append every
rollout to the archive (`archive/step_N/train.jsonl.gz`, prime_rl.orchestrator.archive), write
`traces.jsonl`, then hand the rank batches to the rollout transport (every `rank_R.bin` atomically, or held for the
trainer's ask over TCP), log metrics and print the step line; checkpoint every `ckpt.interval` steps. Over TCP the
run ends once the trainer took the last step. A weight watcher loads every new `weights/step_N/STABLE` into the inference server and
evaluates the policy on version 0, every `eval.interval` versions (an eval source's own `interval` for that source)
and the final one (`eval/step_N.jsonl`).
After `max_empty_steps` consecutive steps with nothing to train (every rollout masked, never sampled or filtered, or
every group with equal rewards, i.e. no nonzero advantage; the trainer then skips its update) the run stops with
`NoProgressError` (exit 1), naming what masked the rollouts or the mean reward; so does a run that reaches
`max_steps` having trained nothing at all, with the masked rollouts counted by reason. A streak of masked rollouts
(`max_consecutive_errors`, `max_error_rate`) stops it earlier with `ErrorStreakError` (exit 1); groups dropped as
stale in a row because their rollouts report versions older than the one loaded at their launch, with
`StaleGroupsError` (exit 1, prime_rl.orchestrator.scheduler). With
`workers.count` > 0 the train rollouts are played in rollout worker processes (prime_rl.orchestrator.workers); one
that exits or cannot start stops the run with `WorkerError` (exit 1, message only).

The main loop and the weight watcher run in one `asyncio.TaskGroup`: an error in either (an `AdmissionError` from
the scheduler, a failed weight load) stops the other at once and ends the run with the original exception. Exit
codes (`orchestrate`): 2 for a user error (a config, a model name, a data file or prompt length that cannot work;
message only), 1 for a run that cannot go on (`NoProgressError`, a timeout; message only) and for anything else
(logged with its traceback), 28 for a full disk (`no space left on device under PATH`, prime_rl.diskfull), 143
after SIGTERM, 130 after Ctrl-C.
"""

from __future__ import annotations

import asyncio
import gc
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.origin import where_set
from prime_rl.inference.backend import InferenceBackend, build_backend
from prime_rl.monitor.logger import get_logger, setup_logging
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.prometheus import OperatorMetrics, start_metrics_server
from prime_rl.monitor.rundir import RunDir
from prime_rl.orchestrator.admission import CutBatch
from prime_rl.orchestrator.agent import AgentLimits
from prime_rl.orchestrator.archive import ArchiveWriter
from prime_rl.orchestrator.checkpoint import load_orchestrator_checkpoint, save_orchestrator_checkpoint
from prime_rl.orchestrator.curriculum import DifficultyPool
from prime_rl.orchestrator.error_streak import ErrorStreakError
from prime_rl.orchestrator.eval import eval_due, run_eval, warn_capped_num_examples
from prime_rl.orchestrator.lengths import check_prompt_lengths
from prime_rl.orchestrator.outcome import (
    ContextTooShort,
    NoProgressError,
    first_error,
    no_progress_message,
    nothing_trained_message,
)
from prime_rl.orchestrator.outputs import trace_rows, write_eval_rows, write_traces
from prime_rl.orchestrator.packing import pack_items, pack_step
from prime_rl.orchestrator.policy_watch import WeightWatcher
from prime_rl.orchestrator.scheduler import Scheduler, StaleGroupsError
from prime_rl.orchestrator.sources import CapacityGate, TaskSource, build_source
from prime_rl.orchestrator.step_metrics import step_line, step_metrics
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.teacher import Teacher, TeacherMismatch, teacher_metrics
from prime_rl.orchestrator.types import PolicyVersion
from prime_rl.orchestrator.workers import WorkerError, WorkerPool
from prime_rl.transport.rollouts import RolloutSender, build_sender

log = get_logger("orchestrator")


class Orchestrator:
    """The orchestrator process's state and main loop; inference client, renderer and sources are injected."""

    def __init__(
        self,
        cfg: OrchestratorConfig,
        *,
        client: InferenceBackend,
        renderer: Any,
        train_sources: list[TaskSource],
        eval_sources: list[TaskSource] | None = None,
        pad_id: int = 0,
        poll_s: float = 0.01,
        echo: bool = True,
        teacher: Teacher | None = None,
        worker_runtime: str | None = None,
    ):
        self.cfg = cfg
        self.client, self.renderer = client, renderer
        self.train_sources = train_sources
        self.eval_sources = eval_sources if eval_sources is not None else train_sources
        self.pad_id = pad_id
        self.echo = echo
        self.teacher = teacher
        self.run_dir = RunDir(Path(cfg.output_dir))
        self.metrics = MetricsWriter(self.run_dir.root, "orchestrator")
        self.eval_metrics = MetricsWriter(self.run_dir.root, "eval")
        self.archive = ArchiveWriter(self.run_dir.root, cfg.archive)
        self.policy = PolicyVersion(0)
        self.gate = CapacityGate()
        self.sched: Scheduler | None = None  # built in `run`, once the sources are started
        self.prom: OperatorMetrics | None = None  # the metrics_server endpoint, started in `run`
        self.sender: RolloutSender | None = None  # the rollout transport, built in `run` (tcp binds its port)
        # `workers.count` > 0: the rollout worker processes (started in `run`); `worker_runtime` builds their backend,
        # renderer and sources (`package.module:function`; None = from the config, as `_main` builds this process's)
        self.workers = WorkerPool(cfg, worker_runtime) if cfg.workers.count else None
        self.curriculum = DifficultyPool(cfg.curriculum) if cfg.curriculum.sampler == "difficulty_pool" else None
        self.stream = TaskStream(train_sources, seed=cfg.seed, weight=self._task_weight if self.curriculum else None)
        self.eval_limits = AgentLimits(cfg.seq_len, cfg.eval.sampling.max_completion_tokens, cfg.reward_range)
        group = getattr(client, "weight_group", None)  # weights over a collective: the servers' source of versions
        self.watcher = WeightWatcher(self.run_dir.weights, client.update_weights, self.policy, poll_s=poll_s,
                                     on_loaded=self._on_loaded, alive=client.check_alive,
                                     via=group["address"] if group else None)  # fmt: skip
        own = {c.name: c for c in cfg.eval.source or []}
        self.eval_settings = {s.name: cfg.eval.settings_of(own.get(s.name)) for s in self.eval_sources}
        self.evaluated: list[int] = []
        self.final_evaluated = asyncio.Event()  # set once the final policy (`max_steps`) is evaluated
        self.start_step = 1
        random.seed(cfg.seed)

    def _task_weight(self, source_idx: int, task: Any) -> float:
        """The curriculum's draw weight of train task `task` of source `i`."""
        return self.curriculum.weight(self.train_sources[source_idx].name, task.task_id) if self.curriculum else 1.0

    # ---- eval ----
    def _due_sources(self, version: int) -> list[TaskSource]:
        """The eval sources due at policy `version` (each by its own interval: `eval.source.N.interval`, else
        `eval.interval`); none once `version` was evaluated."""
        return [s for s in self.eval_sources
                if eval_due(version, self.eval_settings[s.name].interval, self.cfg.max_steps, self.evaluated)]

    def _eval_due(self, version: int) -> bool:
        return bool(self._due_sources(version))

    async def _on_loaded(self, version: int) -> None:
        if self._eval_due(version):
            await self.evaluate(version)

    async def evaluate(self, version: int) -> dict[str, float]:
        """Evaluate the loaded policy (version `version`) on the eval sources due at it (all of them when none is):
        `eval/step_N.jsonl` and an `eval` metrics row."""
        t0 = time.monotonic()
        sources = self._due_sources(version) or self.eval_sources
        res = await run_eval(
            sources, self.client, self.renderer, self.cfg.eval.sampling, self.eval_limits,
            num_examples=self.cfg.eval.num_examples, rollouts_per_example=self.cfg.eval.rollouts_per_example,
            pass_threshold=self.cfg.eval.pass_threshold, gate=self.gate,
            inflight_sem=self.sched.sem if self.sched is not None else None,
            max_inflight=self.cfg.concurrency.max_inflight, settings=self.eval_settings,
        )
        write_eval_rows(self.run_dir.eval / f"step_{version}.jsonl", version, res.rows)
        await asyncio.to_thread(self.archive.write, version, "eval", res.rollouts)
        res.metrics["eval/time_s"] = time.monotonic() - t0
        self.eval_metrics.log(version, res.metrics)
        self.evaluated.append(version)
        if version == self.cfg.max_steps:
            self.final_evaluated.set()
        ks = {s: self.eval_settings[s].rollouts_per_example for s in res.by_source}
        summary = " | ".join(f"{s} avg@{ks[s]} {m[f'avg@{ks[s]}']:.4f} pass@{ks[s]} {m[f'pass@{ks[s]}']:.3f}"
                             for s, m in res.by_source.items())  # fmt: skip
        log.info("Eval policy %d | %s", version, summary)
        return res.metrics

    # ---- resume / checkpoint ----
    def _resume(self) -> None:
        """Load `ckpt.resume_step` (this run's) or `ckpt.resume_dir` (another run's `checkpoints/step_N`), leaving
        the task stream fresh with `ckpt.skip_dataloader` and counting from step 1 with `ckpt.skip_progress`."""
        ck = self.cfg.ckpt
        if not ck.resuming:
            if ck.skips:
                log.warning("ckpt.%s set, but neither ckpt.resume_step nor ckpt.resume_dir: nothing is resumed, so "
                            "nothing is skipped", ", ckpt.".join(ck.skips))  # fmt: skip
            return
        if ck.resume_dir is not None:
            root, rs = Path(ck.resume_dir).parent, int(Path(ck.resume_dir).name[len("step_"):])
        else:
            root, rs = self.run_dir.checkpoints, ck.resume_step
        resumed_step, state = load_orchestrator_checkpoint(root, rs)
        if not ck.skip_dataloader:
            self.stream.load_state_dict(state["stream"])
            random.setstate(_tuple_state(state["py_rng"]))
            if self.curriculum is not None and "curriculum" in state:
                self.curriculum.load_state_dict(state["curriculum"])
        if not ck.skip_progress:
            self.evaluated = list(state.get("evaluated", []))
            self.start_step = resumed_step + 1
        log.info("resumed from checkpoint step %d of %s; next step %d%s", resumed_step, root, self.start_step,
                 f" (fresh: {', '.join(s.removeprefix('skip_') for s in ck.skips)})" if ck.skips else "")  # fmt: skip

    def _checkpoint(self, step: int, sched: Scheduler) -> None:
        iv = self.cfg.ckpt.interval
        if iv is None or step % iv:
            return
        rng = random.getstate()
        state = {
            "stream": self.stream.state_dict(outstanding=sched.outstanding()),
            "py_rng": [rng[0], list(rng[1]), rng[2]],
            "evaluated": self.evaluated,
        }
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        path = save_orchestrator_checkpoint(self.run_dir.checkpoints, step, state, self.cfg.ckpt.keep_last,
                                            self.cfg.ckpt.keep_interval)
        log.info("checkpoint step %d -> %s", step, path)

    # ---- one step ----
    async def _write_step(self, batch: CutBatch, step_time_s: float) -> dict[str, Any]:
        """Metrics, traces and the packed rank batches of one step. Files are written (and fsynced) in a worker
        thread, so the rollouts of the next step keep running meanwhile; this returns once the rollout transport
        has the batches (tcp: may wait while the trainer is more than max_async_level + 1 steps behind)."""
        step = batch.step
        metrics = step_metrics(batch, step_time_s, self.policy.version)
        metrics["inflight"] = self.sched.inflight if self.sched is not None else 0
        metrics["weight_load_s"] = self.watcher.last_load_s
        metrics.update(self.sched.recipe_metrics(batch) if self.sched is not None else {})
        if self.teacher is not None:
            metrics.update(teacher_metrics(batch.rollouts))
        step_dir = self.run_dir.rollout_step(step)
        traces = None
        if self.cfg.traces_per_step:
            traces = trace_rows(batch.rollouts, self.cfg.traces_per_step, step)
        batches = pack_step(
            pack_items(batch.rollouts, self.cfg.loss_aggregation), step=step, seq_len=self.cfg.seq_len, num_ranks=self.cfg.num_train_ranks,
            pad_id=self.pad_id, metrics={k: v for k, v in metrics.items() if isinstance(v, int | float)},
        )
        await asyncio.to_thread(self.archive.write, step, "train", batch.rollouts)
        if traces is not None:
            await asyncio.to_thread(write_traces, step_dir, traces)
        await self.sender.send(step, batches)
        metrics["micro_batches_per_rank"] = len(batches[0].micro_batches)
        self.metrics.log(step, metrics)
        if self.prom is not None:
            self.prom.orchestrator_step(step, metrics, running=self.sched.inflight if self.sched else 0,
                                        ready=len(self.sched.ready) if self.sched else 0)  # fmt: skip
        line = step_line(step, metrics, self.cfg.max_steps)
        log.info(line)
        if self.echo:
            print(line, flush=True)
        return metrics

    async def run(self) -> list[dict[str, Any]]:
        """Run until `max_steps` (forever when None); returns the per-step metrics.

        Raises:
            NoProgressError: `max_empty_steps` consecutive steps, or every step of the run, had nothing to train.
            AdmissionError: a group's collection or admission failed (the scheduler's error, cause kept).
            TimeoutError: no policy version came for `weights_timeout_s`.
        """
        self._resume()
        self.sender = build_sender(self.cfg.rollout_transport, self.run_dir.root, num_ranks=self.cfg.num_train_ranks,
                                   max_async_level=self.cfg.max_async_level, start_step=self.start_step,
                                   timeout_s=self.cfg.weights_timeout_s)  # fmt: skip
        if self.cfg.weight_transport.type == "collective" and hasattr(self.sender, "published"):
            sender = self.sender  # tcp: trainer rank 0 announces each version (no node reads another's weights/)
            self.watcher.announced = lambda: sender.published
        self.prom = start_metrics_server("orchestrator", self.cfg.metrics_server)
        for source in {id(x): x for x in self.train_sources + self.eval_sources}.values():
            await source.start()
        pairs = [(s, "train") for s in self.train_sources]
        if self.cfg.eval.scheduled:
            pairs += [(s, "eval") for s in self.eval_sources if self.eval_settings[s.name].interval is not None]
        check_prompt_lengths(pairs, self.renderer, self.cfg.seq_len)
        warn_capped_num_examples([s for s, split in pairs if split == "eval"], self.cfg.eval, prefix="orchestrator.",
                                 where=where_set)  # fmt: skip
        tune_gc()
        sched = self.sched = Scheduler(
            self.cfg, sources=self.train_sources, stream=self.stream, client=self.client, renderer=self.renderer,
            policy=self.policy, gate=self.gate, curriculum=self.curriculum, teacher=self.teacher, workers=self.workers,
        )
        await self.watcher.poll_once()  # on resume: load the checkpoint's policy before sampling anything
        error: BaseException | None = None
        try:
            if self.workers is not None:
                await self.workers.start()
            async with asyncio.TaskGroup() as tasks:
                watcher = tasks.create_task(self._watch(), name="weight-watcher")
                server = tasks.create_task(self.sender.serve(), name="rollout-transport")
                try:
                    out = await self._steps(sched)
                    await sched.aclose()
                    await self._final_eval()
                    if out:
                        await self.sender.drain(self.start_step + len(out) - 1, self.cfg.weights_timeout_s)
                finally:
                    watcher.cancel()
                    server.cancel()
        except BaseExceptionGroup as group:
            error = first_error(group)  # raised below, outside this handler: its own cause and traceback only
        finally:
            await sched.aclose()
            if self.workers is not None:
                await self.workers.aclose()
            gc.unfreeze()  # collectable again at exit (extension modules report frozen objects as leaks)
            await self.sender.aclose()
            if self.prom is not None:
                self.prom.close()
        if error is not None:
            raise error
        return out

    async def _watch(self) -> None:
        """Evaluate the policy loaded now if due, then load (and evaluate) every new policy version."""
        if self._eval_due(self.policy.version):
            await self.evaluate(self.policy.version)
        await self.watcher.run()

    async def _steps(self, sched: Scheduler) -> list[dict[str, Any]]:
        """Steps `start_step`..`max_steps`: cut, write, checkpoint; stops on empty steps (see `run`)."""
        out: list[dict[str, Any]] = []
        masked: Counter = Counter()
        trained = False
        step, last = self.start_step, time.monotonic()
        empty_since: int | None = None
        limit = self.cfg.max_empty_steps
        while self.cfg.max_steps is None or step <= self.cfg.max_steps:
            batch = await sched.next_batch(step)
            now = time.monotonic()
            metrics = await self._write_step(batch, now - last)
            out.append(metrics)
            last = now
            masked.update({k.removeprefix("errors/"): v for k, v in metrics.items() if k.startswith("errors/")})
            self._checkpoint(step, sched)
            # the teacher term trains
            if metrics["loss_tokens"] > 0 and (metrics["trainable"] > 0 or self.teacher is not None):
                empty_since, trained = None, True
            else:
                empty_since = step if empty_since is None else empty_since
                log.warning("step %d: nothing to train (no loss token, or every advantage is 0); the trainer skips its "
                            "update (unless trainer.loss.ref_kl_coef > 0, whose term trains such steps)", step)  # fmt: skip
                if limit is not None and step - empty_since + 1 >= limit:
                    raise NoProgressError(no_progress_message(empty_since, step, metrics, limit))
            step += 1
        if out and not trained:
            raise NoProgressError(nothing_trained_message(self.start_step, out, masked))
        return out

    async def _final_eval(self) -> None:
        """Wait for the final policy (`max_steps`) to load and be evaluated, when an eval of it is due. With weights
        over a collective it is awaited in any case: trainer rank 0's broadcast of a version blocks until the inference
        workers receive it, which they do only when this process asks them (`/update_weights`), so leaving earlier
        would leave the trainer waiting `weight_transport.timeout_s` and then failing.

        Raises:
            TimeoutError: the final version did not load within `weights_timeout_s`.
        """
        final = self.cfg.max_steps
        due = final is not None and self._eval_due(final)
        if final is None or not (due or self.cfg.weight_transport.type == "collective"):
            return
        await self.policy.wait_for(final, self.cfg.weights_timeout_s)
        if due:
            await self.final_evaluated.wait()


def tune_gc(young: int = 10_000) -> None:
    """Keep Python's cyclic garbage collector off the hot path of the agent loop: the objects alive now (tokenizer,
    tasks, sources: set up once, never garbage) move to the permanent generation (`gc.freeze`), and the youngest
    generation is collected after `young` allocations instead of 700. The loop allocates many short-lived, acyclic
    objects (parsed answers, token lists) that reference counting frees, so full collections would walk the large
    set-up heap again and again for nothing (`benchmarks/orchestrator.py` measures the control plane)."""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, young), gen1, gen2)


def _tuple_state(state: list) -> tuple:
    return (state[0], tuple(state[1]), state[2])


async def _main(cfg: OrchestratorConfig) -> None:
    from prime_rl.config.loader import where_set
    from prime_rl.config.recipes import inert_recipe_settings
    from prime_rl.models.renderer import load_tokenizer, make_renderer

    for fields, message in inert_recipe_settings(cfg, where_set):  # a switch set off (refused when never set)
        log.warning("%s: %s", ", ".join(f + where_set(f) for f in fields), message)
    tok = load_tokenizer(cfg.model.name, cfg.model.chat_template)
    renderer = make_renderer(tok, cfg.renderer)
    train_sources = [build_source(s) for s in cfg.train.source]
    eval_sources = [build_source(s) for s in cfg.eval.source] if cfg.eval.source else train_sources
    client = build_backend(cfg, loads_weights=True)
    teacher = Teacher(cfg.teacher) if cfg.teacher is not None else None
    try:
        await client.wait_healthy()
        await check_context_length(client, cfg.seq_len)
        if teacher is not None:
            await teacher.check(tok, cfg.model.name, cfg.seq_len)
        orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=train_sources,
                            eval_sources=eval_sources, pad_id=tok.pad_token_id or 0, teacher=teacher)
        await orch.run()
    finally:
        if teacher is not None:
            await teacher.aclose()
        for source in {id(x): x for x in train_sources + eval_sources}.values():
            await source.aclose()
        await client.aclose()


async def check_context_length(client: InferenceBackend, seq_len: int) -> None:
    """Refuse a `seq_len` above the context length the inference server reports (a backend that reports none is
    not checked): every rollout reaching it would be refused by vLLM. Raises ContextTooShort naming both."""
    from prime_rl.config.rl import check_seq_len_fits

    ctx = await client.context_length()
    if ctx is not None:
        check_seq_len_fits(seq_len, ctx, "the inference server's context length (max_model_len)",
                           f"restart inference with --vllm.max-model-len {seq_len}", error=ContextTooShort)  # fmt: skip


def run_until_terminated(main: Any) -> bool:
    """`asyncio.run(main)`, where SIGTERM (what `rl` sends to stop a run) cancels `main` instead of killing the
    process, so every `finally` runs: running rollouts are cancelled and close their episodes (their sessions on
    a resources server), sources and clients close. Returns True when SIGTERM stopped it."""
    stopped = False

    async def runner() -> None:
        nonlocal stopped
        task, loop = asyncio.current_task(), asyncio.get_running_loop()

        def on_term() -> None:
            nonlocal stopped
            stopped = True
            log.warning("SIGTERM: stopping; closing the open episodes")
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        asyncio.run(runner())
    except asyncio.CancelledError:
        if not stopped:
            raise
    return stopped


def run(cfg: OrchestratorConfig) -> None:
    """Entry point of the `orchestrator` command: `orchestrate`, its metrics (orchestrator and eval rows) forwarded to
    W&B when `[wandb]` is set (started on its own; under `rl` the launcher forwards them)."""
    from prime_rl.monitor.wandb_log import run_with_wandb

    run_with_wandb(orchestrate, cfg, "orchestrator", {"orchestrator", "eval"})


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean the run's inputs cannot work (config, model name, data, prompt lengths, a missing extra):
    exit 2 with the message alone."""
    from prime_rl.config.loader import ConfigError
    from prime_rl.envs.base import EnvArgsError
    from prime_rl.extras import MissingExtraError
    from prime_rl.hf_data import DataLoadError
    from prime_rl.inference.backend import ServedModelMismatch
    from prime_rl.models.hub import ModelNotFoundError
    from prime_rl.orchestrator.lengths import PromptTooLong
    from prime_rl.registry import RegistryError

    return (ConfigError, RegistryError, ModelNotFoundError, DataLoadError, MissingExtraError, PromptTooLong,
            ContextTooShort, FileNotFoundError, EnvArgsError, TeacherMismatch, ServedModelMismatch)  # fmt: skip


def orchestrate(cfg: OrchestratorConfig) -> None:
    """Run the orchestrator; exits with the codes of the module docstring (143 after SIGTERM, once the open
    episodes are closed)."""
    run_dir = Path(cfg.output_dir)
    setup_logging("orchestrator", run_dir, cfg.log.level)
    try:
        if run_until_terminated(_main(cfg)):
            sys.exit(128 + signal.SIGTERM)
    except KeyboardInterrupt:
        sys.exit(130)
    except user_errors() as e:
        log.error("%s", e)
        sys.exit(2)
    except (NoProgressError, ErrorStreakError, StaleGroupsError, TimeoutError, WorkerError) as e:
        log.error("%s", e)
        sys.exit(1)
    except Exception as e:
        from prime_rl.diskfull import EXIT_CODE, reason, report

        if (line := reason(e, run_dir)) is not None:  # a full disk: one line, on stderr too (the log may be cut)
            report(line, "orchestrator")
            sys.exit(EXIT_CODE)
        log.error("the orchestrator stopped: %s: %s", type(e).__name__, e, exc_info=e)
        sys.exit(1)
