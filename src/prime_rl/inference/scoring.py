"""Prompt logprobs from a vLLM server: how on-policy distillation's teacher scores the student's tokens.

`PromptScorer` sends a token sequence to `/v1/completions` with the token ids as the prompt, `max_tokens = 1` and
`prompt_logprobs = 0`: vLLM answers, for every position t >= 1, the server model's log q(token_t | tokens_<t) of the
actual token, computed from its logits at temperature 1 (vLLM's prompt logprobs ignore the request's sampling
settings; -inf comes back as -9999). At start (`check`) the servers answer `/health`, serve the named model, hold
`seq_len + 1` tokens, and tokenize a probe text (with the student's special and added tokens) to the same ids as the
student's tokenizer; otherwise `TeacherMismatch` names both models. The orchestrator reaches this module through
`prime_rl.inference.backend.build_scorer` (its one seam into the inference package).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prime_rl.config.teacher import TeacherConfig
from prime_rl.inference import admin
from prime_rl.inference.backend import InferenceError, TeacherMismatch
from prime_rl.inference.routing import Router

COMPLETIONS_ROUTE = "/v1/completions"
TOKENIZE_ROUTE = "/tokenize"
PROBE_TEXT = (
    "Reverse the text: 'Hello, World!' -> '!dlroW ,olleH'. 1234567890 + 0.5 = 1234567890.5\n"
    "def f(x):\n    return {'a': [x, x ** 2]}  # comment\t tab\n"
    "Grüße, naïve café; 日本語のテキスト; emoji 🙂; ∑ ∫ ≤ ≥ ≠; <tool_call>{\"name\": \"f\"}</tool_call>"
)
MAX_PROBE_SPECIAL = 512


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


def named(field: str) -> str:
    """The orchestrator config's field `field` with where this process's command line set it (`model.name, in
    FILE`; `config.origin.where_set`), or the field alone (a default, or nothing parsed)."""
    from prime_rl.config.origin import where_set

    where = where_set(field).strip()
    return f"{field}, {where[1:-1]}" if where else field


def check_same_tokens(student_ids: list[int], teacher_ids: list[int], student: str, teacher: str) -> None:
    """Raise TeacherMismatch, naming both models (with where they were set) and the first differing position,
    unless the ids are equal."""
    if student_ids == teacher_ids:
        return
    first = next((i for i, (a, b) in enumerate(zip(student_ids, teacher_ids, strict=False)) if a != b),
             min(len(student_ids), len(teacher_ids)))  # fmt: skip
    raise TeacherMismatch(
        f"the teacher's tokenizer differs from the student's: the probe text is {len(student_ids)} tokens for the "
        f"student {student!r} ({named('model.name')}) and {len(teacher_ids)} for the teacher {teacher!r} "
        f"({named('teacher.name')}), first different at token {first} (student "
        f"{student_ids[first:first + 5]}, teacher {teacher_ids[first:first + 5]}); the teacher scores the student's "
        "token ids, so both must share one tokenizer: choose a teacher of the student's model family"
    )


class PromptScorer:
    """Client of the teacher server(s) of `[orchestrator.teacher]` (see the module docstring): `check` once at
    start, `prompt_logprobs` per token sequence, `aclose` at the end."""

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
        for url, ids in (await admin.served_models(self.router)).items():
            try:
                admin.check_served_model(self.cfg.name, {url: ids})
            except ValueError:
                raise TeacherMismatch(
                    f"the teacher server at {url} ({named('teacher.base_url')}) serves {ids}, not {self.cfg.name!r} "
                    f"({named('teacher.name')}): set teacher.name to the model it serves, or point teacher.base_url "
                    f"at a server of {self.cfg.name!r}"
                ) from None
        ctx = await admin.context_length(self.router)
        if ctx is not None and ctx < seq_len + 1:
            raise TeacherMismatch(
                f"the teacher {self.cfg.name!r} ({named('teacher.name')}) holds {ctx} tokens (max_model_len), but "
                f"scoring a sample of up to seq_len = {seq_len} tokens ({named('seq_len')}) needs seq_len + 1: start "
                f"the teacher with --vllm.max-model-len {seq_len + 1} (rl: teacher.vllm.max_model_len) or lower seq_len"
            )
        text = probe_text(tokenizer)
        mine = list(tokenizer.encode(text, add_special_tokens=False))
        body = {"model": self.cfg.name, "prompt": text, "add_special_tokens": False}
        for url in self.router.urls:
            theirs = (await self.router.post(url, TOKENIZE_ROUTE, body)).get("tokens")
            check_same_tokens(mine, list(theirs or []), student, self.cfg.name)

    async def prompt_logprobs(self, ids: list[int], key: str | None = None) -> list[float]:
        """The teacher's logprob of each token of `ids` given the tokens before it ([T]; position 0: 0.0), from one
        server (`key`, e.g. the rollout id, keeps a rollout's requests on one server).

        Raises:
            InferenceError: a refused request or an answer without the prompt logprobs.
            NoReplicaLeft: every teacher server is down."""
        body = {"model": self.cfg.name, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0}
        url, answer = await self.router.post_routed(key, COMPLETIONS_ROUTE, body)
        return parse_prompt_logprobs(ids, answer, url)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.router.aclose()
