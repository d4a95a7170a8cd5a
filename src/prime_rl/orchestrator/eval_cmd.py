"""`evals @ config` (also `prime-rl eval`): evaluate a model on environments' eval splits, with a results table.

The model is sampled by the inference backend `backend` names (`prime_rl.inference.backend`): the inference
server(s) at `client.base_url` (`server`, the default) or transformers in this process (`transformers`: no server
needed).

Same machinery as the orchestrator's eval (agent loop, sources, avg@k / pass@k); writes
`output_dir/eval/step_0.jsonl` (per-task rows) and an `eval` row in `output_dir/metrics.jsonl`, then prints one
table row per source.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from pathlib import Path
from typing import Any

from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.inference.backend import InferenceBackend, InferenceError, build_backend
from prime_rl.monitor.logger import get_logger, setup_logging
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.orchestrator.agent import AgentLimits
from prime_rl.orchestrator.eval import EvalResult, run_eval
from prime_rl.orchestrator.main import user_errors
from prime_rl.orchestrator.outputs import write_eval_rows
from prime_rl.orchestrator.sources import CapacityGate, build_source

log = get_logger("eval")


def results_table(res: EvalResult, k: int, title: str = "Eval"):
    """A rich Table: one row per source (tasks, rollouts, avg@k, pass@k, pass@1, error %, truncated %, turns)."""
    from rich.table import Table

    t = Table(title=title)
    cols = ["Source", "Tasks", "Rollouts", f"avg@{k}", f"pass@{k}", "pass@1", "Error", "Truncated", "Turns"]
    if k == 1:
        cols.remove("pass@1")  # the same column twice otherwise
    for col in cols:
        t.add_column(col, justify="left" if col == "Source" else "right")

    def f(x: float, d: int = 4) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

    for name, m in res.by_source.items():
        row = [name, str(int(m["tasks"])), str(int(m["rollouts"])), f(m[f"avg@{k}"]), f(m[f"pass@{k}"], 3)]
        row += [f(m["pass@1"], 3)] if k != 1 else []
        row += [f"{m['error_pct']:.1f}%", f"{m['truncated_pct']:.1f}%", f(m["turns"], 1)]
        t.add_row(*row)
    return t


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


async def evaluate(
    cfg: EvalCommandConfig, client: InferenceBackend | None = None, renderer=None, sources=None
) -> EvalResult:
    """Run the eval; client (the `backend`), renderer and sources are built from `cfg` unless given (tests)."""
    src_cfgs = cfg.eval.source or []
    if not src_cfgs and sources is None:
        raise ValueError("eval.source is empty: name at least one environment ([[eval.source]] env.id = ...)")
    sources = sources if sources is not None else [build_source(s) for s in src_cfgs]
    own = client is None
    if client is None:
        client = build_backend(cfg)
        try:
            await wait_with_progress(client.wait_healthy(), f"waiting for inference ({cfg.backend})")
            await client.check_model(cfg.model.name)
        except BaseException:
            await client.aclose()
            raise
    if renderer is None:  # after the server check: a wrong model.name is named there, not in a hub download
        from prime_rl.models.renderer import load_tokenizer, make_renderer

        try:
            renderer = make_renderer(load_tokenizer(cfg.model.name, cfg.model.chat_template), cfg.renderer)
        except BaseException:
            if own:
                await client.aclose()
            raise
    try:
        for s in sources:
            await s.start()
        res = await run_eval(
            sources, client, renderer, cfg.eval.sampling, AgentLimits(cfg.seq_len, cfg.eval.sampling.max_completion_tokens),
            num_examples=cfg.eval.num_examples, rollouts_per_example=cfg.eval.rollouts_per_example,
            pass_threshold=cfg.eval.pass_threshold, max_inflight=cfg.concurrency.max_inflight, gate=CapacityGate(),
        )
    finally:
        for s in sources:
            await s.aclose()
        if own:
            await client.aclose()
    out = Path(cfg.output_dir)
    write_eval_rows(out / "eval" / "step_0.jsonl", 0, res.rows)
    MetricsWriter(out, "eval").log(0, res.metrics)
    return res


def run(cfg: EvalCommandConfig) -> None:
    """Entry point of the `evals` command."""
    from rich.console import Console

    setup_logging("eval", Path(cfg.output_dir), cfg.log.level)
    try:
        res = asyncio.run(evaluate(cfg))
    except KeyboardInterrupt:
        sys.exit(130)
    except user_errors() as e:
        log.error("%s", e)
        sys.exit(2)
    except (TimeoutError, InferenceError) as e:  # the server is not there or refuses: the message says which
        log.error("%s", e)
        sys.exit(1)
    except Exception as e:
        log.error("eval stopped: %s: %s", type(e).__name__, e, exc_info=e)
        sys.exit(1)
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs and pipes get the whole table
    console.print(results_table(res, cfg.eval.rollouts_per_example, title=f"Eval of {cfg.model.name}"))
    print(f"per-task results: {Path(cfg.output_dir) / 'eval' / 'step_0.jsonl'}")
