"""The sampling requests of the inference client: their bodies and the parsing of their answers.

Token-in/token-out goes through vLLM's `POST /inference/v1/generate` (server flag `--enable-scale-out`, set by
`prime_rl.inference.server`): prompt token ids in; sampled token ids, the logprob of each sampled token and the
weight-version spans out, with no detokenisation in between (a byte of a multi-byte character has no text of its
own). Logprobs are vLLM's processed logprobs: log_softmax(logits / T) after top-k/top-p masking, the behaviour
policy the trainer's importance ratio needs (docs/design.md invariant 2). Evaluation may also use the OpenAI
`/v1/chat/completions` route.
"""

from __future__ import annotations

from prime_rl.config.orchestrator import SamplingConfig
from prime_rl.inference.backend import GenerateResult, InferenceError

GENERATE_ROUTE = "/inference/v1/generate"
CHAT_ROUTE = "/v1/chat/completions"

# Sent with every request, so server-side defaults (`--override-generation-config`, a model's generation_config.json)
# cannot change the distribution sampled from: the trainer's logprobs assume plain tempered softmax (docs/design.md
# invariant 9).
NEUTRAL_SAMPLING = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def _top_k(sampling: SamplingConfig) -> int:
    return 0 if sampling.top_k in (-1, 0) else sampling.top_k


def generate_params(sampling: SamplingConfig, max_tokens: int, stop_token_ids: list[int] | None) -> dict:
    """The `sampling_params` of one generate request: the sampling settings, the neutral ones, at most `max_tokens`
    tokens, the sampled token's logprob only, no detokenisation."""
    params: dict = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": _top_k(sampling),
                    **NEUTRAL_SAMPLING, "max_tokens": max_tokens, "logprobs": 0, "detokenize": False}  # fmt: skip
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    if stop_token_ids:
        params["stop_token_ids"] = list(stop_token_ids)
    return params


def generate_body(prompt: list[int], params: dict, model: str | None) -> dict:
    """The JSON body of one generate request (`model`: the served model's name, when the server needs it)."""
    body: dict = {"token_ids": prompt, "sampling_params": params}
    if model:
        body["model"] = model
    return body


def chat_body(messages: list[dict], tools: list[dict] | None, sampling: SamplingConfig, model: str | None) -> dict:
    """The JSON body of one chat completion: tools are offered with tool_choice "auto" (unconstrained sampling)."""
    body: dict = {"messages": messages, "temperature": sampling.temperature, "top_p": sampling.top_p,
                  "top_k": _top_k(sampling), **NEUTRAL_SAMPLING, "max_tokens": sampling.max_completion_tokens}  # fmt: skip
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if model:
        body["model"] = model
    return body


def weight_version(reported: str | None) -> int:
    """A weight version as vLLM reports it ("default" or unset: 0, the base model). Raises InferenceError on a
    non-integer."""
    if reported in (None, "", "default"):
        return 0
    try:
        return int(reported)
    except ValueError:
        raise InferenceError(f"server reported a non-integer weight version {reported!r}") from None


def parse_choice(url: str, choice: dict, prompt: list[int], known_version: int) -> GenerateResult:
    """One answer choice of replica `url` as a GenerateResult (`prompt`: the list the caller sent, handed back as is:
    the agent loop compares it by identity; `known_version`: the version `url` was last told to load, used when
    the choice carries no version spans). Raises InferenceError when its logprobs do not line up with its ids."""
    ids = list(choice.get("token_ids") or [])
    content = (choice.get("logprobs") or {}).get("content") or []
    if len(content) != len(ids) or [c["token_id"] for c in content] != ids:
        raise InferenceError(f"{url}: logprobs do not line up with the sampled ids ({len(content)} vs {len(ids)})")
    spans = choice.get("weight_versions") or []
    return GenerateResult(
        prompt_ids=prompt,
        completion_ids=ids,
        logprobs=[float(c["logprob"]) for c in content],
        finish_reason=choice.get("finish_reason") or "stop",
        policy_version=min((weight_version(s["version"]) for s in spans), default=known_version),
    )
