"""Async client for prime-rl's inference servers (what the orchestrator and eval import): the `server` inference
backend (`prime_rl.inference.backend`).

It composes three pieces:

- sampling (`prime_rl.inference.sampling`): token-in/token-out `generate` through vLLM's
  `/inference/v1/generate`, and OpenAI `chat` for evaluation; with `client.parallel_sampling`, a group's identical
  prompts go as one request with n samples (`prime_rl.inference.parallel_sampling`);
- routing (`prime_rl.inference.routing` over `prime_rl.inference.pool`): several servers (data-parallel inference
  replicas) behind one client; a rollout's first request goes to the replica with the fewest outstanding
  requests, its later turns to the same replica (its prefix cache holds the earlier turns); retries and failover;
- admin (`prime_rl.inference.admin`): weight updates on every replica, health, served model and context length.

HTTP is prime-rl's one HTTP layer (`prime_rl.http`: one pooled aiohttp session per client). `client.api_key` is sent
as `Authorization: Bearer KEY` with every request: vLLM's `--api-key` and the server's admin token
(`server.token`) both accept it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
from prime_rl.inference import admin
from prime_rl.inference.admin import check_served_model as check_served_model
from prime_rl.inference.backend import GenerateResult, InferenceError, completion_budget
from prime_rl.inference.parallel_sampling import Call, ParallelSampler
from prime_rl.inference.pool import NoReplicaLeft as NoReplicaLeft
from prime_rl.inference.routing import Router
from prime_rl.inference.routing import ServerUnavailable as ServerUnavailable
from prime_rl.inference.sampling import (
    CHAT_ROUTE,
    GENERATE_ROUTE,
    chat_body,
    generate_body,
    generate_params,
    parse_choice,
)

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import EvalCommandConfig, OrchestratorConfig


class InferenceClient:
    """Async, connection-pooled client for one or more prime-rl inference servers (see module docstring).

    Args:
        cfg: the `client` section (server URLs, timeouts, retries, API key, parallel sampling).
        model: the served model's name, sent with each request when set.

    Raises ValueError when `cfg.base_url` is empty.
    """

    loads_weights = True

    def __init__(self, cfg: ClientConfig, model: str | None = None):
        self.cfg = cfg
        self.model = model
        self.router = Router(cfg)
        self.urls = self.router.urls
        self.pool = self.router.pool
        self._known_version: dict[str, int] = dict.fromkeys(self.urls, 0)
        # `client.parallel_sampling`: a group's identical prompts as one request with n samples
        self._parallel = ParallelSampler(self._generate_n) if cfg.parallel_sampling else None
        # set by `from_config` with weight_transport.type = "collective": the weight group every update joins
        self.weight_group: dict | None = None

    @classmethod
    def from_config(cls, cfg: OrchestratorConfig | EvalCommandConfig) -> InferenceClient:
        """The client of the orchestrator's `client` or `evals`' `backend` (type server): server URLs, timeouts,
        retries."""
        from prime_rl.config.client import ClientConfig

        client = cls(cfg.backend if isinstance(cfg.backend, ClientConfig) else cfg.client)
        wt = getattr(cfg, "weight_transport", None)
        if wt is not None and wt.type == "collective":
            client.weight_group = admin.weight_group(wt.group_spec("orchestrator"), len(client.urls))
        return client

    # -- sampling --------------------------------------------------------------------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingConfig,
        *,
        rollout_id: str | None = None,
        stop_token_ids: list[int] | None = None,
        max_tokens: int | None = None,
    ) -> GenerateResult:
        """Sample one completion of `prompt_ids` (token-in/token-out).

        `max_tokens` overrides `sampling.max_completion_tokens` (e.g. the room left in the context); generation
        also stops at the model's eos ids and `stop_token_ids`. With `client.parallel_sampling`, calls with the same
        prompt and settings in one event-loop iteration share one request (`prime_rl.inference.parallel_sampling`).
        Raises ValueError on an empty prompt or max_tokens < 1, InferenceError when the server refuses or stays
        unreachable, NoReplicaLeft when every replica is down.
        """
        params = generate_params(sampling, completion_budget(prompt_ids, sampling, max_tokens), stop_token_ids)
        prompt = prompt_ids if type(prompt_ids) is list else list(prompt_ids)
        if self._parallel is not None:
            return await self._parallel.submit(rollout_id, prompt, params)
        body = generate_body(prompt, params, self.model)
        url, data = await self.router.post_routed(rollout_id, GENERATE_ROUTE, body)
        return parse_choice(url, data["choices"][0], prompt, self._known_version[url])

    async def _generate_n(self, calls: list[Call]) -> list[GenerateResult]:
        """One request for `calls` (same prompt and settings, `ParallelSampler`): `n` = len(calls) with the first
        call's seed (vLLM seeds choice i with seed + i), routed as the first call's rollout; every call's rollout
        is then pinned to the replica that answered (its later turns find the prompt in that prefix cache). One
        call: the plain request. Returns one result per call, choice i for call i. Raises as `generate`."""
        params = dict(calls[0].params)
        if len(calls) > 1:
            params["n"] = len(calls)
        body = generate_body(calls[0].prompt, params, self.model)
        url, data = await self.router.post_routed(calls[0].rollout_id, GENERATE_ROUTE, body,
                                                  samples=len(calls))  # fmt: skip
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(calls):
            raise InferenceError(f"{url}: asked for n = {len(calls)} samples, got {len(choices)} choices")
        for call in calls[1:]:
            if call.rollout_id is not None:
                self.pool.pin(call.rollout_id, url)
        known = self._known_version[url]
        return [parse_choice(url, ch, c.prompt, known) for ch, c in zip(choices, calls, strict=True)]

    async def chat(self, messages: list[dict], tools: list[dict] | None, sampling: SamplingConfig) -> dict:
        """Plain OpenAI `/v1/chat/completions` (for evaluation); returns the full response JSON (choices[0].message
        holds content and parsed `tool_calls`). Tools are offered with tool_choice "auto" (unconstrained sampling).
        Raises as `generate`."""
        body = chat_body(messages, tools, sampling, self.model)
        return (await self.router.post_routed(None, CHAT_ROUTE, body))[1]

    def assume_policy_version(self, version: int) -> None:
        """Record `version` on the results of servers that report no version spans, as `update_weights` does once
        they loaded it; for a client that does not load weights itself (a rollout worker,
        prime_rl.orchestrator.worker_main), told the version the orchestrator loaded. Never lowers a version."""
        for url in self._known_version:
            self._known_version[url] = max(self._known_version[url], version)

    # -- admin -----------------------------------------------------------------------------------------------------
    async def update_weights(self, path: str, version: int) -> None:
        """Load the policy in `path` (weights/step_N/) as `version` on every replica that is up, concurrently
        (`prime_rl.inference.admin.update_weights`); with `weight_group` set, the servers receive it from the
        trainer over the weight group instead of reading `path`. Raises InferenceError (a live replica failed),
        NoReplicaLeft."""
        await admin.update_weights(self.router, path, version, self._known_version, self.weight_group)

    async def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Poll GET /health on every server every 0.5 s until all answer 200 (at most `timeout_s`, default
        `client.health_timeout_s`); TimeoutError names the others."""
        await admin.wait_healthy(self.router, self.cfg.health_timeout_s if timeout_s is None else timeout_s)

    async def served_models(self) -> dict[str, list[str]]:
        """The model ids each server lists at GET /v1/models, by URL. Raises InferenceError when one does not
        answer 200."""
        return await admin.served_models(self.router)

    async def check_model(self, name: str) -> None:
        """Raise ServedModelMismatch unless every server serves `name` (`check_served_model`), InferenceError
        when one does not answer GET /v1/models."""
        check_served_model(name, await self.served_models())

    async def context_length(self) -> int | None:
        """The smallest context length (tokens) the servers report (`max_model_len` at GET /v1/models); None when
        none reports one."""
        return await admin.context_length(self.router)

    def check_alive(self) -> None:
        """Raise `NoReplicaLeft` when every replica is down (the run cannot sample any more)."""
        self.pool.check_alive()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.router.aclose()

    async def __aenter__(self) -> InferenceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
