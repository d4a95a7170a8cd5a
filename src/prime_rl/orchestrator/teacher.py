"""On-policy distillation's teacher (`[orchestrator.teacher]`): scores the student's own samples.

After a group is sampled (`Scheduler`), every sample of its unmasked rollouts (prompt, completions and the tool or
template tokens between them, as one token sequence) goes to a teacher server, which returns the teacher's
log q(token_t | tokens_<t) of every actual token at temperature 1 (`prime_rl.inference.scoring.PromptScorer`, built
through `prime_rl.inference.backend.build_scorer`). The logprobs of the
sample's loss tokens are kept (`Sample.teacher_logprobs`, 0.0 elsewhere) and go to the trainer with the batch
(`transport.batch`, field `teacher_logprobs`), whose loss turns them into the per-token reverse KL to the teacher
(`prime_rl.trainer.loss.dppo_kl_loss`).

A rollout the teacher cannot score (a refused request, retries exhausted: `teacher/error`) or whose teacher
logprob is NaN or inf on a loss token (`teacher/non_finite`) is masked like any failed rollout (docs/design.md
invariants 3 and 7); when every teacher server is down the run stops (`NoReplicaLeft`). The metric `teacher/kl` is
the mean over the step's trained loss tokens of log p - log q with p the inference logprobs (the sampled estimator
of the reverse KL(student || teacher); at a sampling temperature other than 1, p is the tempered student).

At start (`check`, `PromptScorer.check`): the servers must serve `name`, hold `seq_len + 1` tokens and tokenize like
the student; otherwise `TeacherMismatch` names both models.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from prime_rl.config.teacher import TeacherConfig
from prime_rl.inference.backend import NoReplicaLeft, TeacherMismatch, build_scorer
from prime_rl.orchestrator.types import Rollout, Sample

__all__ = ["Teacher", "TeacherMismatch", "teacher_metrics"]


class Teacher:
    """The teacher of `[orchestrator.teacher]` (see the module docstring). `check` once at start, `score_group` per
    group, `aclose` at the end."""

    def __init__(self, cfg: TeacherConfig):
        self.cfg = cfg
        self.scorer = build_scorer(cfg)

    async def check(self, tokenizer: Any, student: str, seq_len: int) -> None:
        """`PromptScorer.check`: the servers' health, served model, context length and tokenizer.

        Raises:
            TimeoutError: a server did not become healthy within `health_timeout_s`.
            TeacherMismatch: another served model, a context under `seq_len + 1` tokens, or another tokenizer
                (names both models)."""
        await self.scorer.check(tokenizer, student, seq_len)

    async def score(self, sample: Sample, rollout_id: str | None = None) -> list[float]:
        """The teacher's logprob of each of `sample`'s loss tokens ([T], 0.0 elsewhere). Raises InferenceError,
        NoReplicaLeft."""
        ids = sample.token_ids if type(sample.token_ids) is list else list(sample.token_ids)
        lps = await self.scorer.prompt_logprobs(ids, rollout_id)
        return [q if m else 0.0 for q, m in zip(lps, sample.loss_mask, strict=True)]

    async def score_group(self, rollouts: list[Rollout]) -> None:
        """Score every sample of the group's unmasked rollouts at once, in place (`Sample.teacher_logprobs`); mask a
        rollout the teacher fails on (`teacher/error`) or scores NaN/inf on a loss token (`teacher/non_finite`).
        Raises NoReplicaLeft when every teacher server is down."""
        jobs = [(r, s) for r in rollouts if not r.masked for s in r.samples]
        results = await asyncio.gather(*(self.score(s, r.rollout_id) for r, s in jobs), return_exceptions=True)
        for (rollout, sample), res in zip(jobs, results, strict=True):
            if isinstance(res, NoReplicaLeft):
                raise res
            if isinstance(res, BaseException) and not isinstance(res, Exception):
                raise res  # cancellation
            if rollout.masked:
                continue
            if isinstance(res, Exception):
                rollout.mask("teacher/error", f"{type(res).__name__}: {res}")
            elif not all(math.isfinite(q) for q in res):
                rollout.mask("teacher/non_finite", "a teacher logprob is NaN or inf on a loss token")
            else:
                sample.teacher_logprobs = res

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.scorer.aclose()


def teacher_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """`teacher/kl`: mean over the loss tokens of the step's trained (unmasked, unfiltered) samples of
    logprob_inference - logprob_teacher; `teacher/tokens`: how many. {} when no sample was scored."""
    total, tokens = 0.0, 0
    for rollout in rollouts:
        if rollout.masked or rollout.filtered:
            continue
        for sample in rollout.samples:
            if sample.teacher_logprobs is None:
                continue
            pairs = zip(sample.logprobs, sample.teacher_logprobs, sample.loss_mask, strict=True)
            for inference_lp, teacher_lp, in_loss in pairs:
                if in_loss:
                    total += inference_lp - teacher_lp
                    tokens += 1
    return {"teacher/kl": total / tokens, "teacher/tokens": float(tokens)} if tokens else {}
