"""`evals @ config` (also `prime-rl eval`): evaluate a model on environments' eval splits, with a results table.

The model is sampled by the inference backend `backend.type` names (`prime_rl.inference.backend`): the inference
server(s) at `backend.base_url` (`server`, the default) or transformers in this process (`transformers`: no server
needed).

Same machinery as the orchestrator's eval (agent loop, sources, avg@k / pass@k). Scores `model.name` once (as step
0), or with `[checkpoints]` a run's `weights/step_N`: a sweep (every N-th, or listed steps) or a watch of a running
run (`prime_rl.orchestrator.eval_sweep`). Each step's result goes to `output_dir/<model>/step_N.jsonl`
(per-task rows) and `step_N.json` (scores; marks the step done, so an interrupted sweep resumes), never
overwritten, plus an `eval` row in `output_dir/metrics.jsonl`; then prints one table (one row per source, and per
step for a sweep) and, for a sweep, draws `output_dir/<model>/sweep.png`.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from pathlib import Path
from typing import Any

from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.config.origin import where_set
from prime_rl.inference.backend import BACKENDS, InferenceBackend, InferenceError, backend_name, build_backend
from prime_rl.monitor.logger import get_logger, setup_logging
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.orchestrator.agent import AgentLimits
from prime_rl.orchestrator.eval import EvalResult, run_eval, warn_capped_num_examples
from prime_rl.orchestrator.eval_sweep import (
    NoCheckpoints,
    ResultExists,
    ResultStore,
    k_of,
    model_key,
    policy_step,
    score_step,
    settings_key,
    sweep,
    sweep_plot,
    sweep_table,
    watch,
)
from prime_rl.orchestrator.main import user_errors
from prime_rl.orchestrator.sources import CapacityGate, build_source

log = get_logger("eval")


def results_table(res: EvalResult, at_k: int, title: str = "Eval"):
    """A rich Table: one row per source (tasks, rollouts, avg@k, pass@k, pass@1, error %, truncated %, turns), k =
    `at_k` (the rollouts per example)."""
    from rich.table import Table

    table = Table(title=title)
    cols = ["Source", "Tasks", "Rollouts", f"avg@{at_k}", f"pass@{at_k}", "pass@1", "Error", "Truncated", "Turns"]
    if at_k == 1:
        cols.remove("pass@1")  # the same column twice otherwise
    for col in cols:
        table.add_column(col, justify="left" if col == "Source" else "right")

    def fmt(value: float, digits: int = 4) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"

    for name, metrics in res.by_source.items():
        # a source's own rollouts_per_example: shown beside its name, its scores in the same columns
        ks = k_of(metrics)
        label = name if ks == at_k else f"{name} (k={ks})"
        row = [label, str(int(metrics["tasks"])), str(int(metrics["rollouts"])), fmt(metrics[f"avg@{ks}"]),
               fmt(metrics[f"pass@{ks}"], 3)]  # fmt: skip
        row += [fmt(metrics["pass@1"], 3)] if at_k != 1 else []
        row += [f"{metrics['error_pct']:.1f}%", f"{metrics['truncated_pct']:.1f}%", fmt(metrics["turns"], 1)]
        table.add_row(*row)
    return table


async def wait_with_progress(wait: Any, what: str) -> Any:
    """Await `wait` with a progress display of the seconds spent (the inference server's start-up)."""
    from prime_rl.monitor.progress import Progress

    task = asyncio.ensure_future(wait)
    try:
        with Progress(what, total=None, unit="s") as bar:
            t0 = time.monotonic()
            while not task.done():
                await asyncio.wait({task}, timeout=1.0)
                bar.update(round(time.monotonic() - t0))
    finally:
        if not task.done():
            task.cancel()
    return task.result()


async def _open_backend(cfg: EvalCommandConfig) -> InferenceBackend:
    """The backend `cfg` names, healthy and serving `cfg.model.name` (closed again when either check fails)."""
    client = build_backend(cfg)
    try:
        await wait_with_progress(client.wait_healthy(), f"waiting for inference ({backend_name(cfg)})")
        await client.check_model(cfg.model.name)
    except BaseException:
        await client.aclose()
        raise
    return client


async def evaluate_steps(
    cfg: EvalCommandConfig, client: InferenceBackend | None = None, renderer=None, sources=None,
    results_dir: Path | None = None,
) -> dict[int, EvalResult]:
    """Evaluate `model.name` once (step 0), or the run's checkpoints `cfg.checkpoints` selects (sweep or watch);
    results by step, each stored under `results_dir/<model>/` (default `results_dir`: `output_dir`;
    `prime_rl.orchestrator.eval_sweep`; done steps are read back, not evaluated again). client (the `backend`),
    renderer and sources are built from `cfg` unless given (tests). A checkpoint is loaded into a backend that
    can load weights (`update_weights`: the inference
    server, which must allow loading from the run's weights folder), else the backend is built anew on the
    checkpoint's folder (`backend = transformers`).

    Raises:
        ValueError: no eval source.
        ResultExists: a stored result of a step was made with other settings.
        NoCheckpoints: the sweep found none of the requested stable checkpoints.
    """
    src_cfgs = cfg.eval.source or []
    if not src_cfgs and sources is None:
        raise ValueError("eval.source is empty: name at least one environment ([[eval.source]] env.id = ...)")
    ck = cfg.checkpoints
    store = ResultStore(Path(results_dir or cfg.output_dir), model_key(cfg.model.name, ck.run_dir), settings_key(cfg))
    sources = sources if sources is not None else [build_source(s) for s in src_cfgs]
    own = client is None
    per_checkpoint = own and ck.run_dir is not None and not BACKENDS.get(backend_name(cfg)).loads_weights
    if own and not per_checkpoint:
        client = await _open_backend(cfg)
    if renderer is None:  # after the server check: a wrong model.name is named there, not in a hub download
        from prime_rl.models.renderer import load_tokenizer, make_renderer

        try:
            renderer = make_renderer(load_tokenizer(cfg.model.name, cfg.model.chat_template), cfg.renderer)
        except BaseException:
            if client is not None and own:
                await client.aclose()
            raise
    metrics = MetricsWriter(Path(cfg.output_dir), "eval")

    async def one(step: int, path: Path | None) -> EvalResult:
        backend = client
        if per_checkpoint:
            backend = await _open_backend(cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(path)})}))
        elif path is not None:
            await backend.update_weights(str(path), step)
        try:
            res = await run_eval(
                sources, backend, renderer, cfg.eval.sampling,
                AgentLimits(cfg.seq_len, cfg.eval.sampling.max_completion_tokens),
                num_examples=cfg.eval.num_examples, rollouts_per_example=cfg.eval.rollouts_per_example,
                pass_threshold=cfg.eval.pass_threshold, max_inflight=cfg.concurrency.max_inflight, gate=CapacityGate(),
                settings={c.name: cfg.eval.settings_of(c) for c in cfg.eval.source or []},
            )
        finally:
            if per_checkpoint:
                await backend.aclose()
        metrics.log(step, res.metrics)
        return res

    try:
        for source in sources:
            await source.start()
        warn_capped_num_examples(sources, cfg.eval, where=where_set)
        if ck.run_dir is None:  # one model, stored as step 0; a run's weights/step_N is named by its policy step
            version = policy_step(cfg.model.name)
            what = (f"{store.key} (policy step {version} of {Path(cfg.model.name).parent.parent})"
                    if version is not None else store.key)  # fmt: skip
            return {0: await score_step(store, 0, None, one, what=what)}
        return await (watch if ck.watch else sweep)(ck, store, one)
    finally:
        for source in sources:
            await source.aclose()
        if own and client is not None:
            await client.aclose()


async def evaluate(
    cfg: EvalCommandConfig, client: InferenceBackend | None = None, renderer=None, sources=None
) -> EvalResult:
    """Evaluate `model.name` once (step 0; `evaluate_steps`): the result, stored under `output_dir/<model>/`."""
    return (await evaluate_steps(cfg, client, renderer, sources))[0]


def run(cfg: EvalCommandConfig) -> None:
    """Entry point of the `evals` command."""
    from rich.console import Console

    setup_logging("eval", Path(cfg.output_dir), cfg.log.level)
    try:
        results = asyncio.run(evaluate_steps(cfg))
    except KeyboardInterrupt:
        sys.exit(130)
    except (*user_errors(), ResultExists, NoCheckpoints) as e:
        log.error("%s", e)
        sys.exit(2)
    except (TimeoutError, InferenceError) as e:  # the server is not there or refuses: the message says which
        log.error("%s", e)
        sys.exit(1)
    except Exception as e:
        log.error("eval stopped: %s: %s", type(e).__name__, e, exc_info=e)
        sys.exit(1)
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs and pipes get the whole table
    at_k = cfg.eval.rollouts_per_example
    key = model_key(cfg.model.name, cfg.checkpoints.run_dir)
    folder = Path(cfg.output_dir) / key
    if cfg.checkpoints.run_dir is None:
        console.print(results_table(results[0], at_k, title=f"Eval of {cfg.model.name}"))
        print(f"per-task results: {folder / 'step_0.jsonl'}")
        return
    if not results:
        log.warning("no checkpoint evaluated (see the log above)")
        return
    console.print(sweep_table(results, at_k, title=f"Eval of {key} across steps"))
    if cfg.checkpoints.plot and len(results) > 1:
        try:
            title = f"{key}: avg@{at_k} and pass@{at_k} by step"
            print(f"plot: {sweep_plot(results, at_k, folder / 'sweep.png', title)}")
        except ImportError as e:  # matplotlib is an optional dependency
            log.warning("no plot (checkpoints.plot): %s; pip install matplotlib", e)
    print(f"per-task results: {folder}/step_N.jsonl")
