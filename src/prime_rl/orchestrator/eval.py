"""Evaluation: k rollouts per eval task, per-task rows and avg@k / pass@k per source.

All three are defined per task, over the task's n unmasked rollouts (n <= k), then averaged over the tasks with
n >= 1 (the `scored_tasks`):

    avg@k  = mean over tasks of (mean reward of the task's unmasked rollouts)
    pass@k = fraction of tasks where at least one unmasked rollout reaches `pass_threshold`
    pass@1 = mean over tasks of c / n (c of the n unmasked rollouts reach the threshold): the unbiased pass@1
             estimator (Chen et al. 2021, arXiv:2107.03374, eq. 1 with k = 1)

so a task weighs the same whatever number of its rollouts were masked (masked rollouts never count as 0), and with
nothing masked avg@k is the mean over all rollouts. Masked rollouts count in `error_pct`; a task whose rollouts are
all masked is left out of the three (its row's `avg` is null) and counted in `tasks` but not `scored_tasks`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prime_rl.config.orchestrator import EvalConfig, EvalSourceSettings, SamplingConfig, repeated_greedy_problem
from prime_rl.inference.backend import InferenceBackend
from prime_rl.monitor.logger import get_logger
from prime_rl.monitor.progress import Progress
from prime_rl.orchestrator.admission import log_masked
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.sources import CapacityGate, TaskSource
from prime_rl.orchestrator.types import Rollout

log = get_logger("orchestrator.eval")
_WARNED: set[str] = set()  # the capped-num_examples warnings this process logged (each said once)


@dataclass
class EvalResult:
    rows: list[dict[str, Any]]  # one per task
    metrics: dict[str, float]  # eval/<source>/avg@k ... and eval/avg@k over all sources
    by_source: dict[str, dict[str, float]]
    rollouts: list[Rollout] = field(default_factory=list)  # every eval rollout, source by source, task by task


def eval_due(version: int, interval: int | None, max_steps: int | None, evaluated: list[int]) -> bool:
    """Whether policy `version` gets evaluated: every `interval` versions (version 0, the base policy, included)
    and the final one (`max_steps`: the trained policy is always evaluated), once each; never without an interval."""
    final = version == max_steps
    return interval is not None and (version % interval == 0 or final) and version not in evaluated


def eval_tasks(source: TaskSource, num_examples: int | None) -> list:
    """The first `num_examples` tasks of the source's eval split (all when None)."""
    tasks = source.tasks("eval")
    return tasks if num_examples is None else tasks[:num_examples]


def capped_num_examples(sources: list[TaskSource], cfg: EvalConfig, *, prefix: str = "",
                        where: Callable[[str], str] = lambda field: "") -> list[str]:
    """One line per started eval source whose `num_examples` (its own `eval.source.N.num_examples`, else
    `eval.num_examples`) is above the size of its eval split, which `eval_tasks` caps it to: the field (`prefix` +
    its name), where it was set (`where(field)`: ` (in FILE)` / ` (from --flag)`, `config.origin.where_set`), the
    source, the split size and the fix."""
    own = {c.name: (index, c) for index, c in enumerate(cfg.source or [])}
    out = []
    for src in sources:
        index, entry = own.get(src.name, (None, None))
        field = "eval.num_examples"
        wanted = cfg.num_examples
        if entry is not None and entry.num_examples is not None:
            field, wanted = f"eval.source.{index}.num_examples", entry.num_examples
        size = len(src.tasks("eval"))
        if wanted is not None and wanted > size:
            out.append(
                f"{prefix}{field}={wanted}{where(field)} is above the {size} tasks in the eval split of source "
                f"{src.name!r}: it is evaluated on all {size}; set {prefix}{field} to at most {size} (unset: the whole split)"
            )
    return out


def warn_capped_num_examples(sources: list[TaskSource], cfg: EvalConfig, *, prefix: str = "",
                             where: Callable[[str], str] = lambda field: "") -> None:
    """Log each line of `capped_num_examples` as a warning, once per process (an eval run every `interval` steps,
    or by `sft` at each eval step, says it the first time only)."""
    for line in capped_num_examples(sources, cfg, prefix=prefix, where=where):
        if line not in _WARNED:
            _WARNED.add(line)
            log.warning("%s", line)


def summarize(rollouts_by_task: list[list[Rollout]], at_k: int, threshold: float) -> dict[str, float]:
    """avg@k, pass@k (k = `at_k`), pass@1 (per task, see the module docstring), error/truncated percentages and
    mean turns over the rollouts of several tasks (one list per task). The three scores are NaN when no task has an
    unmasked rollout."""
    all_r = [r for rs in rollouts_by_task for r in rs]
    scored = [[r for r in rs if not r.masked] for rs in rollouts_by_task]
    scored = [rs for rs in scored if rs]
    nan = float("nan")
    num_scored = len(scored)
    out = {
        f"avg@{at_k}": sum(sum(r.reward for r in rs) / len(rs) for rs in scored) / num_scored if num_scored else nan,
        f"pass@{at_k}": (sum(any(r.reward >= threshold for r in rs) for rs in scored) / num_scored
                         if num_scored else nan),
        "pass@1": (sum(sum(r.reward >= threshold for r in rs) / len(rs) for rs in scored) / num_scored
                   if num_scored else nan),
        "tasks": float(len(rollouts_by_task)),
        "scored_tasks": float(num_scored),
        "rollouts": float(len(all_r)),
        "error_pct": 100.0 * sum(r.masked for r in all_r) / len(all_r) if all_r else 0.0,
        "truncated_pct": 100.0 * sum(r.truncated for r in all_r) / len(all_r) if all_r else 0.0,
        "turns": sum(r.num_turns for r in all_r) / len(all_r) if all_r else 0.0,
    }
    return out


async def run_eval(
    sources: list[TaskSource],
    client: InferenceBackend,
    renderer: Any,
    sampling: SamplingConfig,
    limits: AgentLimits,
    *,
    num_examples: int | None,
    rollouts_per_example: int,
    pass_threshold: float = 1.0,
    inflight_sem: asyncio.Semaphore | None = None,
    gate: CapacityGate | None = None,
    max_inflight: int = 32,
    settings: Mapping[str, EvalSourceSettings] | None = None,
) -> EvalResult:
    """Play the rollouts of each eval task of each source (concurrently, bounded), with a progress bar (or log lines
    when not on a terminal) over the rollouts. Masked rollouts' reasons are logged, a few per kind.

    A source named in `settings` (`EvalConfig.settings_of`) plays its own `num_examples` tasks,
    `rollouts_per_example` rollouts each, with its own `sampling` (and its `max_completion_tokens` in `limits`);
    the others use the arguments. The all-source metrics (`eval/avg@k`, ...) are written when every source has one
    k; with several, only `eval/pass@1` and the counts are, beside each source's own.

    Raises:
        ValueError: temperature 0 with more than one rollout per example (identical rollouts counted as
            independent; `config.orchestrator.repeated_greedy_problem`).
    """
    if not sources or any(s.name not in (settings or {}) for s in sources):
        problem = repeated_greedy_problem(sampling.temperature, rollouts_per_example, prefix="")
        if problem is not None:
            raise ValueError(problem)
    plans = {}
    for src in sources:
        own = (settings or {}).get(src.name)
        if own is None:
            plans[src.name] = (num_examples, rollouts_per_example, sampling, limits)
        else:
            plans[src.name] = (own.num_examples, own.rollouts_per_example, own.sampling,
                               dataclasses.replace(limits, max_completion_tokens=own.sampling.max_completion_tokens))
        _, k_src, samp, _ = plans[src.name]
        problem = repeated_greedy_problem(samp.temperature, k_src, prefix="")
        if problem is not None:
            raise ValueError(f"eval source {src.name!r}: {problem}")
    sem = inflight_sem or asyncio.Semaphore(max_inflight)
    gate = gate or CapacityGate()
    progress = Progress("eval rollouts", total=None, unit="rollouts")

    async def one(src, task, rep):
        _, _, samp, lim = plans[src.name]
        async with sem, gate(src):
            rollout = await run_rollout(task, src, client, renderer, samp, lim,
                                        rollout_id=f"eval/{src.name}/{task.task_id}/{rep}")
        progress.advance()
        return rollout

    rows, metrics, by_source = [], {}, {}
    per_source = []
    for src in sources:
        task_count, num_rollouts, _, _ = plans[src.name]
        tasks = eval_tasks(src, task_count)
        futs = [[asyncio.create_task(one(src, t, j)) for j in range(num_rollouts)] for t in tasks]
        per_source.append((src, tasks, futs))
    progress.total = sum(len(fs) for _, _, futs in per_source for fs in futs)
    with progress:
        try:
            for src, tasks, futs in per_source:
                done = [list(await asyncio.gather(*fs)) for fs in futs]
                by_source[src.name] = summarize(done, plans[src.name][1], pass_threshold)
                for eval_task, rs in zip(tasks, done, strict=True):
                    rows.append(
                        {
                            "source": src.name,
                            "task_id": eval_task.task_id,
                            "index": eval_task.index,
                            "rewards": [r.reward for r in rs],
                            "masked": [r.masked for r in rs],
                            "errors": [r.error for r in rs if r.error],
                            "turns": [r.num_turns for r in rs],
                            "truncated": [r.truncated for r in rs],
                            "avg": (sum(r.reward for r in rs if not r.masked) / sum(not r.masked for r in rs)
                                    if any(not r.masked for r in rs) else None),
                            "pass": any(r.reward >= pass_threshold and not r.masked for r in rs),
                        }
                    )
                for name, value in by_source[src.name].items():
                    metrics[f"eval/{src.name}/{name}"] = value
        except BaseException:
            for _, _, futs in per_source:
                for fs in futs:
                    for future in fs:
                        future.cancel()
            raise
    log_masked("eval", [r for _, _, futs in per_source for fs in futs for f in fs for r in [f.result()]])
    if len(sources) > 1:
        allr = []
        for _, _, futs in per_source:
            allr += [[f.result() for f in fs] for fs in futs]
        ks = {plans[s.name][1] for s in sources}
        num_rollouts = min(ks)
        # no one k: per source only
        mixed = {f"avg@{num_rollouts}", f"pass@{num_rollouts}"} - {"pass@1"} if len(ks) > 1 else set()
        for name, value in summarize(allr, num_rollouts, pass_threshold).items():
            if name not in mixed:
                metrics[f"eval/{name}"] = value
    else:
        for name, value in by_source[sources[0].name].items():
            metrics[f"eval/{name}"] = value
    rollouts = [f.result() for _, _, futs in per_source for fs in futs for f in fs]
    return EvalResult(rows=rows, metrics=metrics, by_source=by_source, rollouts=rollouts)
