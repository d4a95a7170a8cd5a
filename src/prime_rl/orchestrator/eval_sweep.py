"""Eval results keyed by model and step, and the sweep over a run's checkpoints (`evals` with `[checkpoints]`).

Layout under the results folder (the `evals` command's `output_dir`; `sft`'s online eval: its run's `eval/`):

    <model>/step_N.jsonl   one row per task (as the orchestrator's eval rows)
    <model>/step_N.json    {"model", "step", "settings", "metrics", "by_source"}: written last, it marks step N done
    <model>/sweep.png      avg@k and pass@k across the steps (sweep and watch)

`<model>` (`model_key`) is the run directory's name for a sweep (`checkpoints.run_dir`); for a local model folder its
name (`<run>--step_N` for a run's `weights/step_N`); else `model.name` made file-safe. A result
is never overwritten: a step whose `step_N.json` exists with the same settings (`settings_key`: model, eval
section, seq_len, seed) is skipped and read back (so an interrupted sweep resumes where it stopped); one with other
settings is refused (`ResultExists`, exit 2) naming the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prime_rl.config.eval_sweep import EvalCheckpointsConfig
from prime_rl.monitor.logger import get_logger
from prime_rl.monitor.rundir import step_dirs
from prime_rl.orchestrator.eval import EvalResult
from prime_rl.orchestrator.outputs import write_eval_rows
from prime_rl.transport.atomic import STABLE, atomic_write_text

log = get_logger("eval")

Evaluate = Callable[[int, Path | None], Awaitable[EvalResult]]  # (step, weights folder or None) -> result


class ResultExists(ValueError):
    """The output folder holds a result for this model and step made with other settings."""


class NoCheckpoints(FileNotFoundError):
    """The run has none of the requested stable checkpoints."""


def model_key(name: str, run_dir: Path | None = None) -> str:
    """The folder name results are keyed by: the run directory's name for a sweep; for a local model folder its
    name (`<run>--step_N` for a run's `weights/step_N`); else `name` file-safe (`Qwen/Qwen3-0.6B` ->
    `Qwen--Qwen3-0.6B`)."""
    if run_dir is not None:
        raw = Path(os.path.abspath(run_dir)).name
    elif Path(name).is_dir():
        path = Path(os.path.abspath(name))  # the name as given (a symbolic link is not followed)
        raw = f"{path.parent.parent.name}--{path.name}" if path.parent.name == "weights" else path.name
    else:
        raw = name
    return re.sub(r"[^A-Za-z0-9._-]+", "--", raw).strip("-.") or "model"


def policy_step(name: str) -> int | None:
    """N when `name` is a run's policy version folder (`.../weights/step_N`, the rule `model_key` follows), else
    None (a base model, a hub id, another folder)."""
    path = Path(os.path.abspath(name))
    match = re.fullmatch(r"step_(\d+)", path.name)
    return int(match.group(1)) if match and path.parent.name == "weights" and path.is_dir() else None


def settings_key(cfg: Any) -> str:
    """12 hex digits of the settings that decide a result: model name, the `eval` section, seq_len, seed, run_dir."""
    data = {"model": cfg.model.name, "eval": cfg.eval.model_dump(mode="json"), "seq_len": cfg.seq_len,
            "seed": cfg.seed, "run_dir": str(cfg.checkpoints.run_dir or "")}  # fmt: skip
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


class ResultStore:
    """The results of one model (`<results folder>/<key>/`), by step."""

    def __init__(self, results_dir: Path, key: str, settings: str):
        self.dir = Path(results_dir) / key
        self.key, self.settings = key, settings

    def rows_file(self, step: int) -> Path:
        return self.dir / f"step_{step}.jsonl"

    def summary_file(self, step: int) -> Path:
        return self.dir / f"step_{step}.json"

    def load(self, step: int) -> EvalResult | None:
        """The stored result of `step`, or None when it is not done. Raises ResultExists when it was made with other
        settings."""
        summary = self.summary_file(step)
        if not summary.is_file():
            return None
        saved = json.loads(summary.read_text())
        if saved.get("settings") != self.settings:
            raise ResultExists(
                f"{summary} holds an eval of {self.key} step {step} made with other settings (eval section, seq_len, "
                "seed or model differ); results are never overwritten: choose another output_dir or delete that file"
            )
        rows = [json.loads(x) for x in self.rows_file(step).read_text().splitlines() if x.strip()]
        return EvalResult(rows=rows, metrics=saved["metrics"], by_source=saved["by_source"])

    def save(self, step: int, res: EvalResult) -> None:
        """Write the rows, then the summary that marks the step done (each atomically)."""
        write_eval_rows(self.rows_file(step), step, res.rows)
        summary = {"model": self.key, "step": step, "settings": self.settings, "metrics": res.metrics,
                   "by_source": res.by_source}  # fmt: skip
        atomic_write_text(self.summary_file(step), json.dumps(summary, allow_nan=True) + "\n")

    def done(self) -> dict[int, EvalResult]:
        """Every stored step's result, by step."""
        out = {}
        for summary in sorted(self.dir.glob("step_*.json")):
            if summary.stem[5:].isdigit() and (result := self.load(int(summary.stem[5:]))) is not None:
                out[int(summary.stem[5:])] = result
        return dict(sorted(out.items()))


def wanted(step: int, ck: EvalCheckpointsConfig, last: int | None = None) -> bool:
    """Whether `step` is evaluated: listed in `steps`, else a multiple of `every` or the last one (`last`: the
    newest stable step of a finished sweep, `until_step` when watching)."""
    if ck.steps is not None:
        return step in ck.steps
    return step % ck.every == 0 or step == last


def stable_steps(run_dir: Path) -> list[tuple[int, Path]]:
    """`(N, run_dir/weights/step_N)` of every stable policy version, by N."""
    return step_dirs(Path(run_dir) / "weights", STABLE)


async def score_step(store: ResultStore, step: int, path: Path | None, evaluate: Evaluate,
                     what: str | None = None) -> EvalResult:  # fmt: skip
    """The result of `step`: read back when done, else evaluated (`evaluate(step, path)`) and stored. `what` names
    it in the log (default `<model> step N`; a single model's eval, stored as step 0, passes its own name)."""
    what = what or f"{store.key} step {step}"
    done = store.load(step)
    if done is not None:
        log.info("%s: already evaluated (%s), skipped", what, store.summary_file(step))
        return done
    t0 = time.monotonic()
    res = await evaluate(step, path)
    store.save(step, res)
    log.info("%s evaluated in %.1f s: %s", what, time.monotonic() - t0, store.rows_file(step))
    return res


async def sweep(ck: EvalCheckpointsConfig, store: ResultStore, evaluate: Evaluate) -> dict[int, EvalResult]:
    """Evaluate the run's stable checkpoints `ck` selects (skipping done ones); results by step.

    Raises:
        NoCheckpoints: a listed step has no stable checkpoint, or none is selected (names what the run has).
    """
    have = stable_steps(ck.run_dir)
    last = have[-1][0] if have else None
    chosen = [(n, p) for n, p in have if wanted(n, ck, last)]
    missing = sorted(set(ck.steps or []) - {n for n, _ in have})
    if missing or not chosen:
        raise NoCheckpoints(
            f"checkpoints.run_dir = {str(ck.run_dir)!r}: no stable weights/step_N for step(s) "
            f"{missing or ck.steps or f'every {ck.every}'} (stable steps there: {[n for n, _ in have] or 'none'})"
        )
    return {n: await score_step(store, n, p, evaluate) for n, p in chosen}


async def watch(ck: EvalCheckpointsConfig, store: ResultStore, evaluate: Evaluate,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> dict[int, EvalResult]:
    """Evaluate each selected stable checkpoint as the run publishes it, until `until_step` is reached or no new
    version came for `timeout_s` (a warning then); done steps are skipped. Results by step. `clock` (seconds) and
    `sleep` pace the polls (tests pass fakes)."""
    results: dict[int, EvalResult] = {}
    seen: set[int] = set()
    last_new = clock()
    while True:
        new = [(n, p) for n, p in stable_steps(ck.run_dir) if n not in seen]
        for step, path in new:
            seen.add(step)
            last_new = clock()
            if wanted(step, ck, ck.until_step):
                results[step] = await score_step(store, step, path, evaluate)
                last_new = clock()
        if ck.until_step is not None and seen and max(seen) >= ck.until_step:
            log.info("%s: step %d reached (checkpoints.until_step = %d): watch ends", store.key, max(seen), ck.until_step)
            break
        if clock() - last_new > ck.timeout_s:
            log.warning("%s: no new stable version in %s for %.0f s (checkpoints.timeout_s): watch ends after %d "
                        "evaluated step(s)", store.key, Path(ck.run_dir) / "weights", ck.timeout_s, len(results))  # fmt: skip
            break
        await sleep(ck.poll_s)
    return dict(sorted(results.items()))


def k_of(metrics: dict[str, float]) -> int:
    """The rollouts per task (k) of one source's eval metrics (`summarize`'s `avg@k` key)."""
    return next(int(key[len("avg@"):]) for key in metrics if key.startswith("avg@"))


def sweep_table(results: dict[int, EvalResult], at_k: int, title: str):
    """A rich Table across steps: one row per (step, source) with tasks, avg@k, pass@k (k = `at_k`), pass@1 and
    error %. A source evaluated with another k (its own `rollouts_per_example`) shows its k beside its name, its
    scores in the same columns."""
    from rich.table import Table

    table = Table(title=title)
    cols = ["Step", "Source", "Tasks", f"avg@{at_k}", f"pass@{at_k}", "pass@1", "Error"]
    if at_k == 1:
        cols.remove("pass@1")  # the same column twice otherwise
    for col in cols:
        table.add_column(col, justify="left" if col == "Source" else "right")

    def fmt(value: Any, digits: int) -> str:
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"

    for step, res in results.items():
        for name, scores in res.by_source.items():
            ks = k_of(scores)
            label = name if ks == at_k else f"{name} (k={ks})"
            row = [str(step), label, str(int(scores["tasks"])), fmt(scores[f"avg@{ks}"], 4),
                   fmt(scores[f"pass@{ks}"], 3)]  # fmt: skip
            table.add_row(*row, *([fmt(scores["pass@1"], 3)] if at_k != 1 else []), f"{scores['error_pct']:.1f}%")
    return table


def sweep_plot(results: dict[int, EvalResult], at_k: int, path: Path, title: str) -> Path:
    """avg@k (solid) and pass@k (dashed; k = `at_k`) of each source against the step, saved to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    sources = sorted({s for r in results.values() for s in r.by_source})
    for source in sources:
        pts = [(n, r.by_source[source]) for n, r in results.items() if source in r.by_source]
        ks = k_of(pts[0][1])
        line = ax.plot([n for n, _ in pts], [m[f"avg@{ks}"] for _, m in pts], marker="o", label=f"{source} avg@{ks}")[0]
        ax.plot([n for n, _ in pts], [m[f"pass@{ks}"] for _, m in pts], marker="x", linestyle="--",
                color=line.get_color(), label=f"{source} pass@{ks}")  # fmt: skip
    ax.set_xlabel("step (policy version)")
    ax.set_ylabel("score")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
