"""Rollouts, the token samples they train on, and the policy version the inference server serves."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from prime_rl.envs.base import Task


@dataclass
class Sample:
    """One token sequence to train on: prompt, sampled completions and interleaved tool/template tokens.

    All lists have the same length T. `loss_mask[t]` is true exactly for tokens the inference engine sampled;
    `logprobs[t]` is the engine's logprob of `token_ids[t]` there (0.0 elsewhere). `teacher_logprobs` (on-policy
    distillation, `prime_rl.orchestrator.teacher`): the teacher's logprob of `token_ids[t]` on the loss tokens (0.0
    elsewhere), None until the teacher scored the sample.
    """

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    teacher_logprobs: list[float] | None = None

    def extend(self, ids: list[int], *, sampled: bool, logprobs: list[float] | None = None) -> None:
        """Append `ids`; sampled tokens need one logprob each."""
        if sampled and (logprobs is None or len(logprobs) != len(ids)):
            raise ValueError(f"{len(ids)} sampled tokens need as many logprobs (got {None if logprobs is None else len(logprobs)})")
        self.token_ids.extend(ids)
        self.loss_mask.extend([sampled] * len(ids))
        self.logprobs.extend(logprobs if sampled else [0.0] * len(ids))

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class Rollout:
    """One episode of one task: its samples, the environment's verdict and bookkeeping.

    `masked` rollouts (environment or transport failure, docs/design.md invariant 3) carry no loss and are excluded from
    their group's baseline; `error_kind` is their class in the step metrics (`errors/<kind>`, e.g.
    `env/invalid_reward`, `advantage/non_finite`, `TimeoutError`) and `error_message` the reason. `policy_versions`
    holds the policy version of every model turn, in order. `rollout_id` is `<task id>/g<group id>/r<k>` in
    training (`eval/<source>/<task id>/<k>` in eval).
    """

    task: Task
    source: str
    group_id: int = 0
    samples: list[Sample] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    reward: float = 0.0
    env_metrics: dict[str, float] = field(default_factory=dict)
    masked: bool = False
    error_kind: str | None = None
    error_message: str | None = None
    rollout_id: str | None = None
    num_turns: int = 0
    truncated: bool = False
    turn_capped: bool = False
    prefix_breaks: int = 0
    malformed_tool_calls: int = 0
    policy_versions: list[int] = field(default_factory=list)
    advantage: float = 0.0
    filtered: bool = False  # out of the loss: zero-advantage group (advantage.filter_zero) or truncated (mask_truncated)
    temperature: float = 1.0
    duration_s: float = 0.0
    worker: int | None = None  # the rollout worker process that played it (orchestrator.workers); None: in-process

    def mask(self, kind: str, message: str) -> None:
        """Mask this rollout: no loss, out of its group's baseline; `kind` and `message` say why."""
        self.masked, self.error_kind, self.error_message = True, kind, message

    @property
    def error(self) -> str | None:
        """`<error_kind>: <error_message>` (as written to traces.jsonl and eval rows), None when not masked."""
        return None if self.error_kind is None else f"{self.error_kind}: {self.error_message}"

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.samples)

    @property
    def num_loss_tokens(self) -> int:
        return sum(s.num_loss_tokens for s in self.samples)

    @property
    def trainable(self) -> bool:
        """Contributes to the loss: not masked, has sampled tokens and a nonzero advantage."""
        return not self.masked and not self.filtered and self.advantage != 0.0 and self.num_loss_tokens > 0


class PolicyVersion:
    """The policy version the inference server serves now, with a wake-up for waiters."""

    def __init__(self, version: int = 0):
        self.version = version
        self.listeners: list[asyncio.Event] = []

    def set(self, version: int) -> None:
        self.version = version
        for ev in self.listeners:
            ev.set()

    async def wait_for(self, version: int, timeout_s: float, where: str = "weights/") -> None:
        """Block until `self.version >= version`. Raises TimeoutError naming the version and where it comes from."""
        ev = asyncio.Event()
        self.listeners.append(ev)
        try:
            deadline = time.monotonic() + timeout_s
            while self.version < version:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"policy version {version} not loaded after {timeout_s:.0f} s (have {self.version}); is the "
                        f"trainer running and publishing {where}step_{version}/STABLE? see logs/trainer.log"
                    )
                ev.clear()
                try:
                    await asyncio.wait_for(ev.wait(), left)
                except TimeoutError:
                    pass
        finally:
            self.listeners.remove(ev)
