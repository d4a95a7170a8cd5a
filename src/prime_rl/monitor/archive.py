"""Reading the rollout archive, and `prime-rl rollouts RUN` (prime_rl.config.archive.RolloutsConfig).

Layout (written by prime_rl.orchestrator.archive): one folder per step, one file per split,

    RUN/archive/step_N/train.jsonl.gz   the N-th step's batch: every rollout the scheduler cut for step N, after
                                        admission (advantages set; masked and filtered rollouts included)
    RUN/archive/step_N/eval.jsonl.gz    the eval of policy version N, every rollout

Each file is a sequence of gzip members (RFC 1952 allows several in one file; `zcat` reads them all), each member a
run of complete JSON lines, appended and fsynced in one write. A killed writer leaves at most one torn member at the
end: `read_records` decodes member by member and skips a torn or corrupt tail with a warning, so everything flushed
before the kill stays readable. A record is one rollout (`prime_rl.orchestrator.archive.rollout_record` lists the
fields).
"""

from __future__ import annotations

import json
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prime_rl.monitor.rundir import step_dirs

SPLITS = ("train", "eval")


class ArchiveTornTail(UserWarning):
    """A file of the archive ends in an incomplete or corrupt gzip member (a writer killed mid-write); the complete
    members before it were read."""


def archive_dir(run: Path) -> Path:
    """`RUN/archive`."""
    return Path(run) / "archive"


def split_file(run: Path, step: int, split: str) -> Path:
    """`RUN/archive/step_N/{train,eval}.jsonl.gz`."""
    return archive_dir(run) / f"step_{step}" / f"{split}.jsonl.gz"


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of one archive file, in write order. A torn or corrupt last member is skipped with an
    `ArchiveTornTail` warning naming the file and the byte offset where the complete members end; a missing file
    reads as empty."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        member = zlib.decompressobj(wbits=31)  # one gzip member
        try:
            text = member.decompress(data[pos:])
        except zlib.error as e:
            _torn(path, pos, len(data), f"corrupt member ({e})")
            break
        if not member.eof:
            _torn(path, pos, len(data), "incomplete member")
            break
        try:
            rows = [json.loads(line) for line in text.decode().splitlines() if line]
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            _torn(path, pos, len(data), f"undecodable member ({e})")
            break
        out += rows
        pos = len(data) - len(member.unused_data)
    return out


def _torn(path: Path, pos: int, size: int, why: str) -> None:
    warnings.warn(f"{path}: {why} at byte {pos} of {size} (a writer stopped mid-write); the {pos} bytes before it "
                  "were read, the rest skipped", ArchiveTornTail, stacklevel=3)  # fmt: skip


def archived_steps(run: Path) -> list[int]:
    """The steps with an archive folder, ascending."""
    return [n for n, _ in step_dirs(archive_dir(run))]


def iter_records(run: Path, *, min_step: int | None = None, max_step: int | None = None,
                 split: str = "all") -> Iterator[dict[str, Any]]:  # fmt: skip
    """The records of steps `min_step`..`max_step` (inclusive; None = open), train before eval within a step."""
    splits = SPLITS if split == "all" else (split,)
    for step in archived_steps(run):
        if (min_step is not None and step < min_step) or (max_step is not None and step > max_step):
            continue
        for split_name in splits:
            yield from read_records(split_file(run, step, split_name))


def matches(record: dict[str, Any], cfg: Any) -> bool:
    """Whether `record` passes the source, task, reward and error filters of `cfg` (an ArchiveFilterConfig)."""
    if cfg.source and record.get("source") not in cfg.source:
        return False
    if cfg.task_id and str(record.get("task_id")) not in cfg.task_id:
        return False
    reward = record.get("reward")
    if cfg.min_reward is not None and (reward is None or reward < cfg.min_reward):
        return False
    if cfg.max_reward is not None and (reward is None or reward > cfg.max_reward):
        return False
    return not (cfg.errors and not record.get("error_kind"))


def select(cfg: Any) -> Iterator[dict[str, Any]]:
    """The records of `cfg.run` that pass every filter of `cfg` (an ArchiveFilterConfig).

    Raises:
        FileNotFoundError: the run has no archive folder.
    """
    if not archive_dir(cfg.run).is_dir():
        raise FileNotFoundError(f"{archive_dir(cfg.run)} does not exist: no rollout archive in {cfg.run} (is it a "
                                "run directory, written with orchestrator.archive.enabled = true?)")  # fmt: skip
    for record in iter_records(cfg.run, min_step=cfg.min_step, max_step=cfg.max_step, split=cfg.split):
        if matches(record, cfg):
            yield record


def step_counts(run: Path) -> list[dict[str, Any]]:
    """Per archived step: rollouts per split, masked rollouts and the mean reward of the unmasked train ones."""
    out = []
    for step in archived_steps(run):
        row: dict[str, Any] = {"step": step}
        for split in SPLITS:
            recs = read_records(split_file(run, step, split))
            row[split] = len(recs)
            row[f"{split}_errors"] = sum(bool(r.get("error_kind")) for r in recs)
            ok = [r["reward"] for r in recs if not r.get("error_kind")]
            row[f"{split}_reward"] = sum(ok) / len(ok) if ok else None
        out.append(row)
    return out


def format_text(record: dict[str, Any]) -> str:
    """One record as a readable block: a header line, then each message (tool calls as `name(arguments)`)."""
    err = f" | error {record['error_kind']}: {record.get('error_message')}" if record.get("error_kind") else ""
    head = (f"== step {record.get('step')} {record.get('split')} | {record.get('rollout_id')} | source "
            f"{record.get('source')} | task {record.get('task_id')} | group {record.get('group_id')} | reward "
            f"{record.get('reward')} | advantage {record.get('advantage')} | policy "
            f"{record.get('policy_versions')}{err}")  # fmt: skip
    lines = [head]
    for message in record.get("messages") or []:
        content = message.get("content")
        lines.append(f"[{message.get('role')}] {content if isinstance(content, str) else json.dumps(content)}")
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            lines.append(f"  -> {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(lines)


def run(cfg: Any) -> None:
    """`prime-rl rollouts` (RolloutsConfig). Raises FileNotFoundError (exit 2) when the run has no archive."""
    if cfg.list_steps:
        if not archive_dir(cfg.run).is_dir():
            raise FileNotFoundError(f"{archive_dir(cfg.run)} does not exist: no rollout archive in {cfg.run}")
        print(f"{'step':>6} {'train':>6} {'errors':>6} {'reward':>8} {'eval':>6} {'errors':>6} {'reward':>8}")
        for row in step_counts(cfg.run):
            if (cfg.min_step is not None and row["step"] < cfg.min_step) or (
                cfg.max_step is not None and row["step"] > cfg.max_step
            ):
                continue
            tr, ev = row["train_reward"], row["eval_reward"]
            print(f"{row['step']:>6} {row['train']:>6} {row['train_errors']:>6} "
                  f"{'-' if tr is None else f'{tr:.4f}':>8} {row['eval']:>6} {row['eval_errors']:>6} "
                  f"{'-' if ev is None else f'{ev:.4f}':>8}")  # fmt: skip
        return
    for i, record in enumerate(select(cfg)):
        if cfg.limit is not None and i >= cfg.limit:
            break
        if cfg.format == "json":
            if not cfg.tokens:
                record = {k: v for k, v in record.items() if k != "samples"}
            print(json.dumps(record, ensure_ascii=False))
        else:
            print(format_text(record) + "\n")
