"""What the orchestrator writes into the run directory, each file atomically (docs/design.md invariant 4):
`rollouts/step_N/rank_R.bin` (the trainer's packed micro-batches), `rollouts/step_N/traces.jsonl` (a few readable
rollouts) and `eval/step_N.jsonl` (per-task eval rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prime_rl.orchestrator.types import Rollout
from prime_rl.transport.atomic import atomic_write_text
from prime_rl.transport.batch import StepBatch, write_batch


def write_step(batches: list[StepBatch], step_dir: Path) -> list[Path]:
    """Write `rank_R.bin` for each batch atomically; returns the paths."""
    paths = []
    for batch in batches:
        path = Path(step_dir) / f"rank_{batch.rank}.bin"
        write_batch(path, batch)
        paths.append(path)
    return paths


def trace_rows(rollouts: list[Rollout], count: int, step: int) -> list[dict[str, Any]]:
    """Up to `n` readable rollouts: the first of each group (groups of any size, listed group by group) first."""
    firsts = [r for i, r in enumerate(rollouts) if i == 0 or r.group_id != rollouts[i - 1].group_id]
    picked = firsts[:count]
    if len(picked) < count:
        picked += [r for r in rollouts if r not in picked][: count - len(picked)]
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


def write_traces(step_dir: Path, rows: list[dict[str, Any]]) -> Path:
    """`step_dir/traces.jsonl`, one JSON row per trace (values JSON cannot hold are written as text)."""
    path = Path(step_dir) / "traces.jsonl"
    atomic_write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))
    return path


def write_eval_rows(path: Path, step: int, rows: list[dict[str, Any]]) -> None:
    """`eval/step_N.jsonl`: one JSON row per task, `step` first."""
    atomic_write_text(Path(path), "".join(json.dumps({"step": step, **row}) + "\n" for row in rows))
