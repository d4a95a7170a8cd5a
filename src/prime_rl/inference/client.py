"""Async client for prime-rl's inference servers (what the orchestrator and eval import).

Token-in/token-out goes through vLLM's `POST /inference/v1/generate` (server flag `--enable-scale-out`, set by
`prime_rl.inference.server`): prompt token ids in; sampled token ids, the logprob of each sampled token and the
weight-version spans out, with no detokenisation in between (a byte of a multi-byte character has no text of its
own). Logprobs are vLLM's processed logprobs: log_softmax(logits / T) after top-k/top-p masking, the behaviour
policy the trainer's importance ratio needs (docs/design.md invariant 2).

Several servers (data-parallel inference replicas) sit behind one client (`prime_rl.inference.pool`): a
rollout's first request goes to the replica with the fewest outstanding requests, its later turns to the same
replica (its prefix cache holds the earlier turns). Transport errors and 5xx answers are retried `max_retries`
times with exponential backoff (0.5 s, 1 s, 2 s, ... capped at 8 s; tenacity's `wait_exponential`); a 4xx answer
is not retried. A replica that still fails and no longer answers `/health` is marked down (logged) and the
request goes to another replica. Weight updates go to every replica that is up and return only when all of them
loaded the version.

HTTP is aiohttp: one `ClientSession` (one pooled connector, keep-alive, no cookie jar) per client, made on first
use inside the running event loop. aiohttp rather than httpx: the client's own CPU per request bounds the control
plane, and httpcore's pool scans every connection per request (`benchmarks/orchestrator.py` measures it; recorded
numbers in docs/results/).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import tenacity

from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
from prime_rl.inference.backend import GenerateResult, InferenceError, completion_budget
from prime_rl.inference.parallel_sampling import Call, ParallelSampler
from prime_rl.inference.pool import NoReplicaLeft as NoReplicaLeft
from prime_rl.inference.pool import ReplicaPool
from prime_rl.monitor.logger import get_logger

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import EvalCommandConfig, OrchestratorConfig

log = get_logger("inference.client")

# Sent with every request, so server-side defaults (`--override-generation-config`, a model's generation_config.json)
# cannot change the distribution sampled from: the trainer's logprobs assume plain tempered softmax
# (docs/design.md invariant 9).
NEUTRAL_SAMPLING = {"min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}

class _ServerError(InferenceError):
    """A 5xx answer (retried)."""


class ServerUnavailable(InferenceError):
    """Transport errors or 5xx answers until the retries ran out."""


# what a request can fail with below HTTP: refused/dropped connections, socket errors, timeouts
TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError, asyncio.TimeoutError)


_JSON = {"Content-Type": "application/json"}


def _loads(raw: bytes) -> Any:
    """JSON with orjson (a generate answer's per-token logprob objects took a fifth of the orchestrator's time with
    the standard library), falling back to `json` for the NaN/Infinity literals orjson refuses. Raises ValueError."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _text(raw: bytes, limit: int) -> str:
    return raw[:limit].decode("utf-8", "replace")


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def _version(v: str | None) -> int:
    if v in (None, "", "default"):
        return 0
    try:
        return int(v)
    except ValueError:
        raise InferenceError(f"server reported a non-integer weight version {v!r}") from None


def check_served_model(name: str, served: dict[str, list[str]]) -> None:
    """Raise ValueError unless every server serves `name` (the same string, or the same folder by path): the
    tokenizer and results table come from `model.name`, the samples from what the server serves."""
    for url, ids in served.items():
        if not any(i == name or Path(i).resolve() == Path(name).resolve() for i in ids):
            raise ValueError(
                f"model.name = {name!r}, but the inference server at {url} serves {ids}: pass --model.name "
                f"{ids[0] if ids else '<the served model>'} or start `inference --model.name {name}`"
            )


class InferenceClient:
    """Async, connection-pooled client for one or more prime-rl inference servers (see module docstring): the
    `server` inference backend (`prime_rl.inference.backend`)."""

    loads_weights = True

    def __init__(self, cfg: ClientConfig, model: str | None = None):
        if not cfg.base_url:
            raise ValueError("client.base_url is empty: give at least one inference server URL")
        self.cfg = cfg
        self.model = model
        self.urls = [u.rstrip("/") for u in cfg.base_url]
        self._headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self.pool = ReplicaPool(self.urls)
        self._known_version: dict[str, int] = dict.fromkeys(self.urls, 0)
        # `client.parallel_sampling`: a group's identical prompts as one request with n samples
        self._parallel = ParallelSampler(self._generate_n) if cfg.parallel_sampling else None

    def _http(self) -> aiohttp.ClientSession:
        """The client's aiohttp session (made on first use, in the running loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1024, limit_per_host=0),
                # connect: waiting for a pooled connection plus connecting; sock_read: between bytes of an answer
                timeout=aiohttp.ClientTimeout(total=None, connect=self.cfg.request_timeout_s,
                                              sock_connect=self.cfg.connect_timeout_s,
                                              sock_read=self.cfg.request_timeout_s),  # fmt: skip
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def _get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        """GET `url` with a total timeout; returns (status, body). Raises TRANSPORT_ERRORS."""
        async with self._http().get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            return r.status, await r.read()

    @classmethod
    def from_config(cls, cfg: OrchestratorConfig | EvalCommandConfig) -> InferenceClient:
        """The client of `cfg.client` (server URLs, timeouts, retries)."""
        return cls(cfg.client)

    # -- routing -------------------------------------------------------------------------------------------------
    def server_for(self, rollout_id: str | None) -> str:
        """The replica for the next request of `rollout_id` (see `ReplicaPool.pick`)."""
        return self.pool.pick(rollout_id)

    def check_alive(self) -> None:
        """Raise `NoReplicaLeft` when every replica is down (the run cannot sample any more)."""
        self.pool.check_alive()

    async def _is_dead(self, url: str) -> bool:
        """Whether `url` does not answer `GET /health` with 200 now (one quick probe)."""
        try:
            status, _ = await self._get(url + "/health", min(5.0, self.cfg.connect_timeout_s))
            return status != 200
        except TRANSPORT_ERRORS:
            return True

    async def _routed_post(self, rollout_id: str | None, route: str, body: dict, samples: int = 1) -> tuple[str, dict]:
        """POST to the replica for `rollout_id` (counted as `samples` sequences in flight there); when it fails for
        good and is dead, mark it down and send the request to another replica. Returns (replica URL, answer).

        Raises:
            InferenceError: a 4xx answer, or a failure of a replica that is still alive.
            NoReplicaLeft: every replica is down."""
        tried: set[str] = set()
        while True:
            url = self.pool.pick(rollout_id, exclude=tried)
            try:
                with self.pool.busy(url, samples):
                    return url, await self._post(url, route, body)
            except ServerUnavailable as e:
                if not await self._is_dead(url):
                    raise
                self.pool.mark_down(url, str(e))
                tried.add(url)

    async def _post(self, url: str, route: str, body: dict) -> Any:
        """POST `body` as JSON and return the decoded answer, retried per the module docstring (tenacity). Raises
        InferenceError on a 4xx answer at once, ServerUnavailable after `client.max_retries` retries of transport
        errors and 5xx answers.

        The first attempt runs outside tenacity (its per-call machinery is a noticeable share of a request's client
        CPU); after a failure tenacity waits 0.5 s, then runs the retries with waits of 1, 2, 4, 8, 8, ... s:
        the documented schedule."""
        data = orjson.dumps(body)
        try:
            return await self._post_once(url, route, data)
        except (*TRANSPORT_ERRORS, _ServerError) as e:
            if self.cfg.max_retries == 0:
                raise self._unavailable(url, route, e) from e
        await _sleep(0.5)
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.cfg.max_retries),
            wait=tenacity.wait_exponential(multiplier=1.0, max=8.0),  # after the 0.5 s above: 1 s, 2 s, ... capped at 8 s
            retry=tenacity.retry_if_exception_type((*TRANSPORT_ERRORS, _ServerError)),
            sleep=_sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._post_once(url, route, data)
        except tenacity.RetryError as e:
            last = e.last_attempt.exception()
            raise self._unavailable(url, route, last) from last
        raise AssertionError("unreachable: tenacity either returned, raised or gave up")

    def _unavailable(self, url: str, route: str, last: BaseException | None) -> ServerUnavailable:
        return ServerUnavailable(f"{url}{route} failed after {self.cfg.max_retries + 1} attempts (client.max_retries): "
                                 f"{type(last).__name__}: {last}")  # fmt: skip

    async def _post_once(self, url: str, route: str, data: bytes) -> Any:
        """One POST: the decoded JSON answer. Raises _ServerError (5xx), InferenceError (4xx, non-JSON) or a
        TRANSPORT_ERRORS exception."""
        async with self._http().post(url + route, data=data, headers=_JSON) as r:
            status, raw = r.status, await r.read()
        if status >= 500:
            raise _ServerError(f"{url}{route} answered {status}: {_text(raw, 500)}")
        if status >= 400:
            raise InferenceError(f"{url}{route} answered {status}: {_text(raw, 1000)}")
        try:
            return _loads(raw)
        except ValueError:
            raise InferenceError(f"{url}{route} answered non-JSON: {_text(raw, 300)!r}") from None

    # -- API -----------------------------------------------------------------------------------------------------
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
        unreachable.
        """
        n = completion_budget(prompt_ids, sampling, max_tokens)
        params: dict = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": 0 if sampling.top_k in (-1, 0) else sampling.top_k,
            **NEUTRAL_SAMPLING,
            "max_tokens": n,
            "logprobs": 0,
            "detokenize": False,
        }
        if sampling.seed is not None:
            params["seed"] = sampling.seed
        if stop_token_ids:
            params["stop_token_ids"] = list(stop_token_ids)
        prompt = prompt_ids if type(prompt_ids) is list else list(prompt_ids)
        if self._parallel is not None:
            return await self._parallel.submit(rollout_id, prompt, params)
        url, data = await self._routed_post(rollout_id, "/inference/v1/generate", self._body(prompt, params))
        return self._result(url, data["choices"][0], prompt)

    def _body(self, prompt: list[int], params: dict) -> dict:
        """The JSON body of one `/inference/v1/generate` request."""
        body: dict = {"token_ids": prompt, "sampling_params": params}
        if self.model:
            body["model"] = self.model
        return body

    async def _generate_n(self, calls: list[Call]) -> list[GenerateResult]:
        """One request for `calls` (same prompt and settings, `ParallelSampler`): `n` = len(calls) with the first
        call's seed (vLLM seeds choice i with seed + i), routed as the first call's rollout; every call's rollout
        is then pinned to the replica that answered (its later turns find the prompt in that prefix cache). One
        call: the plain request. Returns one result per call, choice i for call i. Raises as `generate`."""
        params = dict(calls[0].params)
        if len(calls) > 1:
            params["n"] = len(calls)
        body = self._body(calls[0].prompt, params)
        url, data = await self._routed_post(calls[0].rollout_id, "/inference/v1/generate", body, samples=len(calls))
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(calls):
            raise InferenceError(f"{url}: asked for n = {len(calls)} samples, got {len(choices)} choices")
        for c in calls[1:]:
            if c.rollout_id is not None:
                self.pool.pin(c.rollout_id, url)
        return [self._result(url, ch, c.prompt) for ch, c in zip(choices, calls, strict=True)]

    def _result(self, url: str, choice: dict, prompt: list[int]) -> GenerateResult:
        """One answer choice as a GenerateResult (`prompt`: the list the caller sent, handed back as is: the agent
        loop compares it by identity). Raises InferenceError when its logprobs do not line up with its ids."""
        ids = list(choice.get("token_ids") or [])
        content = (choice.get("logprobs") or {}).get("content") or []
        if len(content) != len(ids) or [c["token_id"] for c in content] != ids:
            raise InferenceError(f"{url}: logprobs do not line up with the sampled ids ({len(content)} vs {len(ids)})")
        spans = choice.get("weight_versions") or []
        version = min((_version(s["version"]) for s in spans), default=self._known_version[url])
        return GenerateResult(
            prompt_ids=prompt,
            completion_ids=ids,
            logprobs=[float(c["logprob"]) for c in content],
            finish_reason=choice.get("finish_reason") or "stop",
            policy_version=version,
        )

    async def chat(self, messages: list[dict], tools: list[dict] | None, sampling: SamplingConfig) -> dict:
        """Plain OpenAI `/v1/chat/completions` (for evaluation); returns the full response JSON (choices[0].message
        holds content and parsed `tool_calls`). Tools are offered with tool_choice "auto" (unconstrained sampling)."""
        body: dict = {
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": 0 if sampling.top_k in (-1, 0) else sampling.top_k,
            **NEUTRAL_SAMPLING,
            "max_tokens": sampling.max_completion_tokens,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if self.model:
            body["model"] = self.model
        return (await self._routed_post(None, "/v1/chat/completions", body))[1]

    async def update_weights(self, path: str, version: int) -> None:
        """Load the policy in `path` (weights/step_N/) as `version` on every replica that is up, concurrently.
        Returns when all of them have reloaded (later requests use it); a replica that fails and no longer answers
        `/health` is marked down instead.

        Raises:
            InferenceError: a replica that is alive refused or failed (names each).
            NoReplicaLeft: no replica is up (before or after this update)."""
        self.pool.check_alive()
        body = {"path": str(path), "version": int(version)}
        urls = self.pool.up()
        results = await asyncio.gather(*(self._post(u, "/update_weights", body) for u in urls), return_exceptions=True)
        errors = []
        for u, r in zip(urls, results, strict=True):
            if not isinstance(r, BaseException):
                self._known_version[u] = int(version)
            elif isinstance(r, ServerUnavailable) and await self._is_dead(u):
                self.pool.mark_down(u, f"update_weights(version={version}): {r}")
            else:
                errors.append(f"{u}: {r}")
        if errors:
            raise InferenceError(f"update_weights({path}, version={version}) failed on: " + "; ".join(errors))
        self.pool.check_alive()

    async def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Poll GET /health on every server every 0.5 s until all answer 200 (at most `timeout_s`, default
        `client.health_timeout_s`); TimeoutError names the others."""
        timeout_s = self.cfg.health_timeout_s if timeout_s is None else timeout_s
        log.info("waiting for inference at %s (client.health_timeout_s = %.0f s; start one with `inference "
                 "--model.name ...`)", ", ".join(self.urls), timeout_s)  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = list(self.urls)
        while True:
            still = []
            for u in pending:
                try:
                    status, _ = await self._get(u + "/health", min(5.0, self.cfg.connect_timeout_s))
                    if status != 200:
                        still.append(u)
                except TRANSPORT_ERRORS:
                    still.append(u)
            pending = still
            if not pending:
                return
            if loop.time() > deadline:
                raise TimeoutError(
                    f"inference server(s) {pending} not healthy after {timeout_s:.0f} s; check client.base_url and "
                    "the servers' logs (<output_dir>/logs/vllm.log: outputs/run/ for a standalone `inference`)"
                )
            await asyncio.sleep(0.5)

    async def served_models(self) -> dict[str, list[str]]:
        """The model ids each server lists at GET /v1/models (OpenAI API), by URL. Raises InferenceError when a
        server does not answer 200."""
        out: dict[str, list[str]] = {}
        for u in self.urls:
            try:
                status, raw = await self._get(u + "/v1/models", min(10.0, self.cfg.request_timeout_s))
            except TRANSPORT_ERRORS as e:
                raise InferenceError(f"{u}/v1/models: {type(e).__name__}: {e}") from e
            if status != 200:
                raise InferenceError(f"{u}/v1/models answered {status}: {_text(raw, 300)}")
            out[u] = [m["id"] for m in _loads(raw).get("data", [])]
        return out

    async def check_model(self, name: str) -> None:
        """Raise ValueError unless every server serves `name` (`check_served_model`), InferenceError when one
        does not answer GET /v1/models."""
        check_served_model(name, await self.served_models())

    async def context_length(self) -> int | None:
        """The smallest context length (tokens) the servers report: vLLM lists `max_model_len` for each model at
        GET /v1/models. None when no server reports one; a server that does not answer is skipped."""
        lens = []
        for u in self.urls:
            try:
                status, raw = await self._get(u + "/v1/models", min(10.0, self.cfg.request_timeout_s))
                if status != 200:
                    continue
                data = _loads(raw).get("data", [])
                lens += [int(m["max_model_len"]) for m in data if isinstance(m.get("max_model_len"), int)]
            except (*TRANSPORT_ERRORS, ValueError, AttributeError):
                continue
        return min(lens) if lens else None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> InferenceClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
