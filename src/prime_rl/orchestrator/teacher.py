"""On-policy distillation's teacher (`[orchestrator.teacher]`): scores the student's own samples.

After a group is sampled (`Scheduler`), every sample of its unmasked rollouts (prompt, completions and the tool or
template tokens between them, as one token sequence) goes to a teacher server's vLLM `/v1/completions` with the
token ids as the prompt, `max_tokens = 1` and `prompt_logprobs = 0`: vLLM answers, for every position t >= 1,
the teacher's log q(token_t | tokens_<t) of the actual token, computed from the teacher's logits at temperature 1
(vLLM's prompt logprobs ignore the request's sampling settings; -inf comes back as -9999). The logprobs of the
sample's loss tokens are kept (`Sample.teacher_logprobs`, 0.0 elsewhere) and go to the trainer with the batch
(`transport.batch`, field `teacher_logprobs`), whose loss turns them into the per-token reverse KL to the teacher
(`prime_rl.trainer.loss.dppo_kl_loss`).

A rollout the teacher cannot score (a refused request, retries exhausted: `teacher/error`) or whose teacher
logprob is NaN or inf on a loss token (`teacher/non_finite`) is masked like any failed rollout (docs/design.md
invariants 3 and 7); when every teacher server is down the run stops (`NoReplicaLeft`). The metric `teacher/kl` is
the mean over the step's trained loss tokens of log p - log q with p the inference logprobs (the sampled estimator
of the reverse KL(student || teacher); at a sampling temperature other than 1, p is the tempered student).

At start (`check`): the servers answer `/health`, serve `name`, hold `seq_len + 1` tokens, and tokenize a probe
text (with the student's special and added tokens) to the same ids as the student's tokenizer; otherwise
`TeacherMismatch` names both models.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from prime_rl.config.teacher import TeacherConfig
from prime_rl.inference import admin
from prime_rl.inference.backend import InferenceError
from prime_rl.inference.pool import NoReplicaLeft
from prime_rl.inference.routing import Router
from prime_rl.orchestrator.types import Rollout, Sample

COMPLETIONS_ROUTE = "/v1/completions"
TOKENIZE_ROUTE = "/tokenize"
PROBE_TEXT = (
    "Reverse the text: 'Hello, World!' -> '!dlroW ,olleH'. 1234567890 + 0.5 = 1234567890.5\n"
    "def f(x):\n    return {'a': [x, x ** 2]}  # comment\t tab\n"
    "Grüße, naïve café; 日本語のテキスト; emoji 🙂; ∑ ∫ ≤ ≥ ≠; <tool_call>{\"name\": \"f\"}</tool_call>"
)
MAX_PROBE_SPECIAL = 512


class TeacherMismatch(ValueError):
    """The teacher cannot score the student's tokens: another tokenizer, another served model, a shorter context."""


VLLM_NEG_INF = -9999.0  # what vLLM's OpenAI server sends for a logprob of -inf (JSON has no infinity)


def parse_prompt_logprobs(ids: Sequence[int], answer: dict[str, Any], url: str) -> list[float]:
    """Per-position teacher logprobs from a `/v1/completions` answer with `prompt_logprobs`: [T] floats, position 0
    (no prediction) 0.0, position t the logprob of `ids[t]`. vLLM's stand-in for a logprob of -inf
    (`VLLM_NEG_INF`, -9999, or below) becomes -inf, so the rollout is masked as non-finite rather than trained
    with a reverse-KL term of ~9999 nats.

    Raises:
        InferenceError: the answer lacks prompt logprobs, has another length, or lacks the actual token at a
            position (names the URL and the position)."""
    try:
        plp = answer["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise InferenceError(f"{url}{COMPLETIONS_ROUTE}: the answer has no prompt_logprobs") from None
    if not isinstance(plp, list) or len(plp) != len(ids):
        got = len(plp) if isinstance(plp, list) else None
        raise InferenceError(f"{url}{COMPLETIONS_ROUTE}: {got} prompt logprobs for a {len(ids)}-token prompt")
    out = [0.0] * len(ids)
    for pos in range(1, len(ids)):
        ent = (plp[pos] or {}).get(str(ids[pos]))
        if not isinstance(ent, dict) or "logprob" not in ent:
            raise InferenceError(f"{url}{COMPLETIONS_ROUTE}: no prompt logprob of token {ids[pos]} at position {pos}")
        value = float(ent["logprob"])
        out[pos] = float("-inf") if value <= VLLM_NEG_INF else value
    return out


def probe_text(tokenizer: Any) -> str:
    """The text both tokenizers must encode alike: `PROBE_TEXT`, then the student's special and added tokens (up
    to `MAX_PROBE_SPECIAL`), space-separated."""
    special = list(dict.fromkeys([*getattr(tokenizer, "all_special_tokens", []),
                                  *sorted(getattr(tokenizer, "get_added_vocab", dict)() or {})]))  # fmt: skip
    return PROBE_TEXT + " " + " ".join(special[:MAX_PROBE_SPECIAL])


def check_same_tokens(student_ids: list[int], teacher_ids: list[int], student: str, teacher: str) -> None:
    """Raise TeacherMismatch, naming both models and the first differing position, unless the ids are equal."""
    if student_ids == teacher_ids:
        return
    first = next((i for i, (a, b) in enumerate(zip(student_ids, teacher_ids, strict=False)) if a != b),
             min(len(student_ids), len(teacher_ids)))  # fmt: skip
    raise TeacherMismatch(
        f"the teacher's tokenizer differs from the student's: the probe text is {len(student_ids)} tokens for the "
        f"student {student!r} (model.name) and {len(teacher_ids)} for the teacher {teacher!r} "
        f"(orchestrator.teacher.name), first different at token {first} (student "
        f"{student_ids[first:first + 5]}, teacher {teacher_ids[first:first + 5]}); the teacher scores the student's "
        "token ids, so both must share one tokenizer: choose a teacher of the student's model family"
    )


class Teacher:
    """Client of the teacher server(s) (see the module docstring). `check` once at start, `score_group` per group,
    `aclose` at the end."""

    def __init__(self, cfg: TeacherConfig):
        self.cfg = cfg
        self.router = Router(cfg.client())

    async def check(self, tokenizer: Any, student: str, seq_len: int) -> None:
        """Wait for the servers' health, then check the served model, the context length and the tokenizer.

        Raises:
            TimeoutError: a server did not become healthy within `health_timeout_s`.
            TeacherMismatch: a server serves another model, holds fewer than `seq_len + 1` tokens, or tokenizes the
                probe text to other ids than the student's tokenizer (names both models)."""
        await admin.wait_healthy(self.router, self.cfg.health_timeout_s)
        try:
            admin.check_served_model(self.cfg.name, await admin.served_models(self.router))
        except ValueError as e:
            raise TeacherMismatch(f"orchestrator.teacher: {e}") from None
        ctx = await admin.context_length(self.router)
        if ctx is not None and ctx < seq_len + 1:
            raise TeacherMismatch(
                f"the teacher {self.cfg.name!r} holds {ctx} tokens (max_model_len), but scoring a sample of up to "
                f"seq_len = {seq_len} tokens needs seq_len + 1: start the teacher with --vllm.max-model-len "
                f"{seq_len + 1} (rl: teacher.vllm.max_model_len) or lower seq_len"
            )
        text = probe_text(tokenizer)
        mine = list(tokenizer.encode(text, add_special_tokens=False))
        body = {"model": self.cfg.name, "prompt": text, "add_special_tokens": False}
        for url in self.router.urls:
            theirs = (await self.router.post(url, TOKENIZE_ROUTE, body)).get("tokens")
            check_same_tokens(mine, list(theirs or []), student, self.cfg.name)

    async def score(self, sample: Sample, rollout_id: str | None = None) -> list[float]:
        """The teacher's logprob of each of `sample`'s loss tokens ([T], 0.0 elsewhere). Raises InferenceError,
        NoReplicaLeft."""
        ids = sample.token_ids if type(sample.token_ids) is list else list(sample.token_ids)
        body = {"model": self.cfg.name, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0}
        url, answer = await self.router.post_routed(rollout_id, COMPLETIONS_ROUTE, body)
        lps = parse_prompt_logprobs(ids, answer, url)
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
        await self.router.aclose()


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
