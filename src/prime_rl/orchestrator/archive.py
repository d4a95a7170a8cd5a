"""The rollout archive's writer (`orchestrator.archive`): every train rollout of every step, after admission, and
every eval rollout, as records in `RUN/archive/step_N/{train,eval}.jsonl.gz` (layout and reading:
prime_rl.monitor.archive).

A write appends whole gzip members (at most `flush_rollouts` records each) to the step's file and fsyncs it, so a
killed orchestrator leaves every earlier member readable and at most one torn member, which readers skip with a
warning. The first write of a (step, split) in a process replaces an existing file: a resumed run plays again the
steps after its checkpoint, and their archive is what that run trains. With `keep_last = K`, writing the train
records of step N deletes the archive folders of steps <= N - K.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from prime_rl.config.archive import ArchiveConfig
from prime_rl.monitor.archive import archive_dir, archived_steps, split_file
from prime_rl.orchestrator.types import Rollout

# gzip level of the archive's members: the fastest (readers decompress any level); the encode and compress run in
# the orchestrator process, which every rollout passes through (docs/scaling.md, control plane)
COMPRESSLEVEL = 1
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def rollout_record(rollout: Rollout, step: int, split: str, *, logprobs: bool = False) -> dict[str, Any]:
    """One rollout as a JSON-ready record.

    Fields: `step`, `split` (train/eval), `rollout_id`, `source`, `task_id`, `group_id`, `messages` (the whole
    conversation in OpenAI chat format: the task's prompt, assistant turns with their `tool_calls`, tool results),
    `prompt_messages` (how many of `messages` are the task's prompt), `tools` (the task's function schemas),
    `reward`, `advantage` (the estimator's, before `loss_aggregation` scaling), `env_metrics`, `policy_versions`
    (one per model turn), `masked`, `filtered`, `trained` (its samples went to the packer: neither masked nor
    filtered), `error_kind`, `error_message`, `num_turns`, `truncated`, `temperature`, `duration_s` (seconds),
    `worker` (the rollout worker process that played it, orchestrator.workers; null when played in the orchestrator
    process), and `samples`: per sample `token_ids` [T], `loss_mask` [T] (1 = sampled by the policy) and, with `logprobs`, the
    inference `logprobs` [T] (0.0 off the loss mask).
    """
    samples = []
    for sample in rollout.samples:
        record: dict[str, Any] = {"token_ids": list(sample.token_ids), "loss_mask": list(map(int, sample.loss_mask))}
        if logprobs:
            record["logprobs"] = list(sample.logprobs)
        samples.append(record)
    return {
        "step": step,
        "split": split,
        "rollout_id": rollout.rollout_id,
        "source": rollout.source,
        "task_id": rollout.task.task_id,
        "group_id": rollout.group_id,
        "messages": rollout.messages,
        "prompt_messages": len(rollout.task.messages),
        "tools": rollout.task.tools,
        "reward": rollout.reward,
        "advantage": rollout.advantage,
        "env_metrics": rollout.env_metrics,
        "policy_versions": rollout.policy_versions,
        "masked": rollout.masked,
        "filtered": rollout.filtered,
        "trained": not rollout.masked and not rollout.filtered,
        "error_kind": rollout.error_kind,
        "error_message": rollout.error_message,
        "num_turns": rollout.num_turns,
        "truncated": rollout.truncated,
        "temperature": rollout.temperature,
        "duration_s": rollout.duration_s,
        "worker": rollout.worker,
        "samples": samples,
    }


def json_lines(records: Sequence[dict[str, Any]]) -> bytes:
    """`records` as UTF-8 JSON lines, encoded with orjson: values JSON cannot hold are written as their text
    (`str`), dict keys that are not strings as their text, and NaN and +-Infinity as `null` (standard JSON, which
    `jq` and other readers accept). A record orjson refuses (an integer beyond 64 bits, nesting deeper than 254) is
    encoded by the standard library's `json` instead."""
    out = []
    for record in records:
        try:
            out.append(orjson.dumps(record, default=str, option=_ORJSON_OPTIONS))
        except orjson.JSONEncodeError:
            out.append((json.dumps(record, default=str, ensure_ascii=False) + "\n").encode())
    return b"".join(out)


def append_members(path: Path, records: Sequence[dict[str, Any]], per_member: int, *, replace: bool = False) -> None:
    """Append `records` to `path` as gzip members of at most `per_member` JSON lines each (`json_lines`), one write
    and one fsync per member (`replace`: truncate the file first). Members are compressed at
    `COMPRESSLEVEL`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb" if replace else "ab") as f:
        for i in range(0, len(records), per_member):
            f.write(gzip.compress(json_lines(records[i : i + per_member]), compresslevel=COMPRESSLEVEL, mtime=0))
            f.flush()
            os.fsync(f.fileno())


class ArchiveWriter:
    """Writes one run's archive (`cfg`: orchestrator.archive) under `run/archive`."""

    def __init__(self, run: Path, cfg: ArchiveConfig):
        self.run, self.cfg = Path(run), cfg
        self.written: set[tuple[int, str]] = set()

    def write(self, step: int, split: str, rollouts: Sequence[Rollout]) -> Path | None:
        """Archive `rollouts` as step `step`'s `split` records (blocking file I/O: call it in a worker thread), then
        apply retention after a train write. Returns the file, None when the archive is off."""
        if not self.cfg.enabled:
            return None
        path = split_file(self.run, step, split)
        records = [rollout_record(r, step, split, logprobs=self.cfg.logprobs) for r in rollouts]
        key = (step, split)
        append_members(path, records, self.cfg.flush_rollouts, replace=key not in self.written)
        self.written.add(key)
        if split == "train" and self.cfg.keep_last is not None:
            prune(self.run, keep_from=step - self.cfg.keep_last + 1)
        return path


def prune(run: Path, keep_from: int) -> list[int]:
    """Delete the archive folders of steps below `keep_from`; returns the steps deleted."""
    gone = [n for n in archived_steps(run) if n < keep_from]
    for step in gone:
        shutil.rmtree(archive_dir(run) / f"step_{step}", ignore_errors=True)
    return gone
