"""`orchestrator @ config`: plays rollouts, scores groups, writes `rollouts/step_N/rank_R.bin` for the trainer,
follows its policy versions, evaluates, checkpoints.

Per step N (from 1, or from a checkpoint's step + 1): wait for `batch_size` rollouts (scheduler), pack their
samples (masked rollouts carry no tokens; zero-advantage groups too with `advantage.filter_zero`), write
`traces.jsonl` then every `rank_R.bin` atomically, log metrics and print the step line; checkpoint every
`ckpt.interval` steps. A weight watcher loads every new `weights/step_N/STABLE` into the inference server and
evaluates the policy on version 0, every `eval.interval` versions and the final one (`eval/step_N.jsonl`).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.monitor.logger import get_logger, setup_logging
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.rundir import RunDir
from prime_rl.orchestrator.agent import AgentLimits
from prime_rl.orchestrator.checkpoint import load_orchestrator_checkpoint, save_orchestrator_checkpoint
from prime_rl.orchestrator.eval import run_eval, write_eval_rows
from prime_rl.orchestrator.packing import PackItem, pack_step, write_step
from prime_rl.orchestrator.scheduler import CutBatch, PolicyVersion, Scheduler
from prime_rl.orchestrator.sources import CapacityGate, TaskSource, build_source
from prime_rl.orchestrator.stats import step_line, step_metrics
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.types import Rollout
from prime_rl.orchestrator.weights import WeightWatcher
from prime_rl.transport.atomic import atomic_write_text

log = get_logger("orchestrator")


def pack_items(rollouts: list[Rollout]) -> list[PackItem]:
    """Trainable material of a step: every sample of every unmasked, unfiltered rollout."""
    return [
        PackItem(s.token_ids, s.loss_mask, s.logprobs, r.advantage, r.temperature)
        for r in rollouts
        if not r.masked and not r.filtered
        for s in r.samples
    ]


def trace_rows(rollouts: list[Rollout], n: int, group_size: int, step: int) -> list[dict[str, Any]]:
    """Up to `n` readable rollouts, one per group first."""
    picked = rollouts[::group_size][:n]
    if len(picked) < n:
        picked += [r for r in rollouts if r not in picked][: n - len(picked)]
    return [
        {
            "step": step,
            "task_id": r.task.task_id,
            "source": r.source,
            "group_id": r.group_id,
            "reward": r.reward,
            "advantage": r.advantage,
            "masked": r.masked,
            "error": r.error,
            "turns": r.num_turns,
            "truncated": r.truncated,
            "policy_versions": r.policy_versions,
            "messages": r.messages,
        }
        for r in picked
    ]


class Orchestrator:
    """The orchestrator process's state and main loop; inference client, renderer and sources are injected."""

    def __init__(
        self,
        cfg: OrchestratorConfig,
        *,
        client: Any,
        renderer: Any,
        train_sources: list[TaskSource],
        eval_sources: list[TaskSource] | None = None,
        pad_id: int = 0,
        poll_s: float = 0.1,
        echo: bool = True,
    ):
        self.cfg = cfg
        self.client, self.renderer = client, renderer
        self.train_sources = train_sources
        self.eval_sources = eval_sources if eval_sources is not None else train_sources
        self.pad_id = pad_id
        self.echo = echo
        self.run_dir = RunDir(Path(cfg.output_dir))
        self.metrics = MetricsWriter(self.run_dir.root, "orchestrator")
        self.eval_metrics = MetricsWriter(self.run_dir.root, "eval")
        self.policy = PolicyVersion(0)
        self.max_inflight = cfg.concurrency.max_inflight
        self.sem = asyncio.Semaphore(self.max_inflight)
        self.gate = CapacityGate()
        self.stream = TaskStream(train_sources, seed=cfg.seed)
        self.limits = AgentLimits(cfg.train.source[0].env.agent.max_turns, cfg.seq_len, cfg.train.sampling.max_completion_tokens)
        self.eval_limits = AgentLimits(
            (cfg.eval.source or cfg.train.source)[0].env.agent.max_turns, cfg.seq_len, cfg.eval.sampling.max_completion_tokens
        )
        self.watcher = WeightWatcher(self.run_dir.weights, client, self.policy, poll_s=poll_s, on_loaded=self._on_loaded)
        self.evaluated: list[int] = []
        self.start_step = 1
        random.seed(cfg.seed)

    # ---- eval ----
    def _eval_due(self, version: int) -> bool:
        iv = self.cfg.eval.interval
        final = version == self.cfg.max_steps  # the trained policy is always evaluated at the end
        return iv is not None and (version % iv == 0 or final) and version not in self.evaluated

    async def _on_loaded(self, version: int) -> None:
        if self._eval_due(version):
            await self.evaluate(version)

    async def evaluate(self, version: int) -> dict[str, float]:
        """Evaluate the loaded policy (version `version`): `eval/step_N.jsonl` and an `eval` metrics row."""
        t0 = time.monotonic()
        res = await run_eval(
            self.eval_sources, self.client, self.renderer, self.cfg.eval.sampling, self.eval_limits,
            num_examples=self.cfg.eval.num_examples, rollouts_per_example=self.cfg.eval.rollouts_per_example,
            pass_threshold=self.cfg.eval.pass_threshold, inflight_sem=self.sem, gate=self.gate,
        )
        write_eval_rows(self.run_dir.eval / f"step_{version}.jsonl", version, res.rows)
        res.metrics["eval/time_s"] = time.monotonic() - t0
        self.eval_metrics.log(version, res.metrics)
        self.evaluated.append(version)
        k = self.cfg.eval.rollouts_per_example
        summary = " | ".join(f"{s} avg@{k} {m[f'avg@{k}']:.4f} pass@{k} {m[f'pass@{k}']:.3f}" for s, m in res.by_source.items())
        log.info("Eval policy %d | %s", version, summary)
        return res.metrics

    # ---- resume / checkpoint ----
    def _resume(self) -> None:
        rs = self.cfg.ckpt.resume_step
        if rs is None:
            return
        n, state = load_orchestrator_checkpoint(self.run_dir.checkpoints, rs)
        self.stream.load_state_dict(state["stream"])
        random.setstate(_tuple_state(state["py_rng"]))
        self.evaluated = list(state.get("evaluated", []))
        self.start_step = n + 1
        log.info("resumed from checkpoint step %d; next step %d", n, self.start_step)

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
        path = save_orchestrator_checkpoint(self.run_dir.checkpoints, step, state, self.cfg.ckpt.keep_last)
        log.info("checkpoint step %d -> %s", step, path)

    # ---- one step ----
    def _write_step(self, batch: CutBatch, step_time_s: float) -> dict[str, Any]:
        step = batch.step
        m = step_metrics(batch, step_time_s, self.policy.version)
        m["inflight"] = sum(1 for g in self._sched.running.values() for t in g.tasks if not t.done())
        step_dir = self.run_dir.rollout_step(step)
        if self.cfg.traces_per_step:
            rows = trace_rows(batch.rollouts, self.cfg.traces_per_step, self.cfg.train.group_size, step)
            atomic_write_text(step_dir / "traces.jsonl", "".join(json.dumps(r, default=str) + "\n" for r in rows))
        batches = pack_step(
            pack_items(batch.rollouts), step=step, seq_len=self.cfg.seq_len, num_ranks=self.cfg.num_train_ranks,
            pad_id=self.pad_id, metrics={k: v for k, v in m.items() if isinstance(v, int | float)},
        )
        write_step(batches, step_dir)
        m["micro_batches_per_rank"] = len(batches[0].micro_batches)
        self.metrics.log(step, m)
        line = step_line(step, m, self.cfg.max_steps)
        log.info(line)
        if self.echo:
            print(line, flush=True)
        return m

    async def run(self) -> list[dict[str, Any]]:
        """Run until `max_steps` (forever when None); returns the per-step metrics."""
        self._resume()
        for s in {id(x): x for x in self.train_sources + self.eval_sources}.values():
            await s.start()
        caps = [s.capacity for s in self.train_sources]
        if all(c is not None for c in caps) and sum(caps) < self.max_inflight:
            log.warning(
                "concurrency.max_inflight (%d) is above what the environment server(s) admit (%d): using %d",
                self.max_inflight, sum(caps), sum(caps),
            )
            self.max_inflight = sum(caps)
            self.sem = asyncio.Semaphore(self.max_inflight)
        await self.watcher.poll_once()  # on resume: load the checkpoint's policy before sampling anything
        sched = self._sched = Scheduler(
            sources=self.train_sources, stream=self.stream, client=self.client, renderer=self.renderer,
            sampling=self.cfg.train.sampling, limits=self.limits, advantage=self.cfg.advantage, policy=self.policy,
            group_size=self.cfg.train.group_size, batch_size=self.cfg.batch_size, max_inflight=self.max_inflight,
            max_async_level=self.cfg.max_async_level, max_off_policy_steps=self.cfg.max_off_policy_steps,
            weights_timeout_s=self.cfg.weights_timeout_s, inflight_sem=self.sem, gate=self.gate,
        )

        async def watch() -> None:
            if self._eval_due(self.policy.version):
                await self.evaluate(self.policy.version)
            await self.watcher.run()

        watch_task = asyncio.create_task(watch(), name="weight-watcher")
        out = []
        step = self.start_step
        last = time.monotonic()
        try:
            while self.cfg.max_steps is None or step <= self.cfg.max_steps:
                batch = await _race(sched.next_batch(step), watch_task)
                now = time.monotonic()
                out.append(self._write_step(batch, now - last))
                last = now
                self._checkpoint(step, sched)
                step += 1
            await sched.aclose()
            final = self.cfg.max_steps
            if final is not None and self._eval_due(final):
                await _race(self.policy.wait_for(final, self.cfg.weights_timeout_s), watch_task)
                while final not in self.evaluated:
                    await _race(asyncio.sleep(0.05), watch_task)
        finally:
            await sched.aclose()
            watch_task.cancel()
            await asyncio.gather(watch_task, return_exceptions=True)
        return out


async def _race(coro, watch_task: asyncio.Task):
    """Await `coro`, but fail at once if the weight watcher died (its error is the cause)."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    exc = watch_task.exception()
    raise RuntimeError(f"the weight watcher stopped: {exc!r}") from exc


def _tuple_state(s: list) -> tuple:
    return (s[0], tuple(s[1]), s[2])


async def _main(cfg: OrchestratorConfig) -> None:
    from prime_rl.inference.client import InferenceClient
    from prime_rl.models.renderer import load_tokenizer, make_renderer

    tok = load_tokenizer(cfg.model.name)
    renderer = make_renderer(tok, cfg.renderer)
    train_sources = [build_source(s) for s in cfg.train.source]
    eval_sources = [build_source(s) for s in cfg.eval.source] if cfg.eval.source else train_sources
    client = InferenceClient(cfg.client)
    try:
        await client.wait_healthy(cfg.client.health_timeout_s)
        orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=train_sources,
                            eval_sources=eval_sources, pad_id=tok.pad_token_id or 0)
        await orch.run()
    finally:
        for s in {id(x): x for x in train_sources + eval_sources}.values():
            await s.aclose()
        await client.aclose()


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
    """Entry point of the `orchestrator` command. Exits 143 after a SIGTERM (once the open episodes are closed)."""
    run_dir = Path(cfg.output_dir)
    setup_logging("orchestrator", run_dir, cfg.log.level)
    try:
        if run_until_terminated(_main(cfg)):
            sys.exit(128 + signal.SIGTERM)
    except KeyboardInterrupt:
        sys.exit(130)
    except (TimeoutError, FileNotFoundError, ValueError, KeyError) as e:
        log.error("%s", e)
        sys.exit(1)
