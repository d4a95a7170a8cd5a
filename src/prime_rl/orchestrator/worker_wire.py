"""The messages between the scheduler and its rollout workers (prime_rl.orchestrator.workers), as msgpack.

A job asks a worker to play one rollout; a result brings the finished rollout back. Every message is one msgpack
array whose first element is its kind:

- scheduler -> worker: `["play", job]`, `["cancel", rollout_id]`, `["stop"]`;
- worker -> scheduler: `["ready", pid]`, `["result", rollout_id, rollout]`, `["error", rollout_id, text]` (the
  job could not be played: a bug or a task list that differs from the scheduler's), `["fatal", text]` (the worker
  could not start).

A job (`Job`) names the task by its source index and position in the source's train split (the worker builds the
same sources from the same config; the task id is sent too and checked), and carries the sampling settings
(`SamplingConfig` as msgpack bytes, so a worker validates each distinct one once), the per-rollout limits and the
policy version the orchestrator had loaded when the job was sent. A rollout travels as every `Rollout` field but
its task (the scheduler has it) and its `worker` (the scheduler sets it), its samples as `[token_ids, loss_mask,
logprobs, teacher_logprobs]` lists.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import msgpack

from prime_rl.envs.base import Task
from prime_rl.orchestrator.types import Rollout, Sample

_ROLLOUT_FIELDS = tuple(f.name for f in dataclasses.fields(Rollout) if f.name not in ("task", "samples", "worker"))


@dataclass
class Job:
    """One rollout to play.

    `source_idx`/`task_pos`: the task (train split) and `task_id` its id, checked by the worker; `sampling`: a
    `SamplingConfig.model_dump(mode="json")` packed with msgpack; `limits`: `[seq_len, max_completion_tokens,
    reward_low, reward_high]` (`agent.AgentLimits`); `policy_version`: the version loaded when the job was sent.
    """

    rollout_id: str
    group_id: int
    source_idx: int
    task_pos: int
    task_id: str
    sampling: bytes
    limits: list[float]
    policy_version: int

    def to_wire(self) -> list[Any]:
        return [self.rollout_id, self.group_id, self.source_idx, self.task_pos, self.task_id, self.sampling,
                self.limits, self.policy_version]  # fmt: skip

    @classmethod
    def from_wire(cls, values: list[Any]) -> Job:
        return cls(*values)


def pack(message: list[Any]) -> bytes:
    """One message as msgpack bytes."""
    return msgpack.packb(message, use_bin_type=True)


def unpack(data: bytes) -> list[Any]:
    """The message `pack` wrote (lists stay lists, bytes stay bytes)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def rollout_to_wire(rollout: Rollout) -> dict[str, Any]:
    """A rollout as msgpack-able values: every field but `task`; samples as 4-element lists."""
    out = {name: getattr(rollout, name) for name in _ROLLOUT_FIELDS}
    out["samples"] = [[s.token_ids, s.loss_mask, s.logprobs, s.teacher_logprobs] for s in rollout.samples]
    return out


def rollout_from_wire(values: dict[str, Any], task: Task, worker: int | None = None) -> Rollout:
    """The rollout `rollout_to_wire` encoded, with its `task` put back and `worker` (the index of the worker that
    played it) recorded.

    Raises:
        ValueError: a field is missing or unknown (the worker runs other code than the orchestrator).
    """
    names = set(values) - {"samples"}
    if names != set(_ROLLOUT_FIELDS) or "samples" not in values:
        raise ValueError(
            f"a rollout from a worker has fields {sorted(values)}, expected {sorted(_ROLLOUT_FIELDS + ('samples',))}: "
            "the worker runs another version of prime-rl"
        )
    fields = {name: values[name] for name in _ROLLOUT_FIELDS}
    samples = [Sample(ids, mask, logprobs, teacher) for ids, mask, logprobs, teacher in values["samples"]]
    return Rollout(task=task, samples=samples, worker=worker, **fields)
