"""`prime-rl export-sft RUN OUT`: archived rollouts (prime_rl.monitor.archive) as SFT data for `sft`'s `data.path`
(prime_rl.config.archive.ExportSFTConfig): the rejection-sampling loop RL -> keep the good rollouts -> SFT.

    prime-rl export-sft outputs/run sft.jsonl --min-reward 1 --top-k 2 --min-step 20

Selection, in order: records of the step range and split; unmasked ones only (a masked rollout has no verdict);
the source, task and reward filters; then per task, highest reward first (ties: the later step, then the rollout
id), one record per distinct completion (the messages after the task's prompt, compared as canonical JSON), at most
`top_k`. Rows are `{"messages", "tools" (when the task has any), "task_id", "source", "step", "reward",
"rollout_id"}`; `sft` reads `messages` and `tools` and ignores the rest. Written atomically as JSONL, or as
parquet (messages and tools as JSON strings, which `sft` parses) when OUT ends in `.parquet`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from prime_rl.monitor.archive import select


class ExportError(ValueError):
    """Nothing to export, or an output format that cannot be written (names the filters or the missing package)."""


def completion_key(record: dict[str, Any]) -> str:
    """The completion of a record (its messages after the task's prompt) as canonical JSON."""
    completion = record.get("messages", [])[record.get("prompt_messages", 0) :]
    return json.dumps(completion, sort_keys=True, ensure_ascii=False)


def pick(records: list[dict[str, Any]], top_k: int | None) -> list[dict[str, Any]]:
    """Per task (first appearance order): distinct completions, highest reward first (ties: later step, then
    rollout id), at most `top_k` (all when None)."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_task[str(record.get("task_id"))].append(record)
    out = []
    for rs in by_task.values():
        rs = sorted(rs, key=lambda r: (-r["reward"], -r["step"], str(r.get("rollout_id"))))
        seen: set[str] = set()
        kept = []
        for record in rs:
            key = completion_key(record)
            if key in seen:
                continue
            seen.add(key)
            kept.append(record)
            if top_k is not None and len(kept) >= top_k:
                break
        out += kept
    return out


def sft_row(record: dict[str, Any]) -> dict[str, Any]:
    """The SFT row of one record."""
    row: dict[str, Any] = {"messages": record["messages"]}
    if record.get("tools"):
        row["tools"] = record["tools"]
    return row | {k: record.get(k) for k in ("task_id", "source", "step", "reward", "rollout_id")}


def export_rows(cfg: Any) -> list[dict[str, Any]]:
    """The SFT rows `cfg` (ExportSFTConfig) selects, in task order."""
    records = [r for r in select(cfg) if not r.get("masked") and not r.get("error_kind")]
    records = [r for r in records if any(m.get("role") == "assistant" for m in r.get("messages") or [])]
    return [sft_row(r) for r in pick(records, cfg.top_k)]


def write_rows(rows: list[dict[str, Any]], out: Path) -> None:
    """JSONL, or parquet when `out` ends in `.parquet` (raises ExportError without pyarrow)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ExportError(f"{out}: writing parquet needs pyarrow (pip install 'prime-rl[datasets]'), or use a .jsonl path") from None
        cols = {k: [json.dumps(r.get(k), ensure_ascii=False) if k in ("messages", "tools") else r.get(k) for r in rows]
                for k in ("messages", "tools", "task_id", "source", "step", "reward", "rollout_id")}  # fmt: skip
        tmp = out.with_name(out.name + ".tmp")
        pq.write_table(pa.table(cols), tmp)
        tmp.replace(out)
        return
    from prime_rl.transport.atomic import atomic_write_text

    atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def run(cfg: Any) -> None:
    """`prime-rl export-sft`. Raises ExportError / FileNotFoundError (exit 2): no archive, nothing selected."""
    rows = export_rows(cfg)
    if not rows:
        raise ExportError(f"no rollout of {cfg.run} passes the filters (split {cfg.split}, steps {cfg.min_step}.."
                          f"{cfg.max_step}, min_reward {cfg.min_reward}, source {cfg.source or 'any'}); loosen them "
                          "(prime-rl rollouts RUN --list-steps shows what is archived)")  # fmt: skip
    write_rows(rows, cfg.out)
    tasks = len({r["task_id"] for r in rows})
    print(f"{len(rows)} SFT rows ({tasks} tasks) from {cfg.run} written to {cfg.out}")
