"""The inference-backend seam: what the orchestrator, the eval command and the agent loop need from an engine
that samples the policy, and the registry that picks one by name (`backend.type` of the orchestrator and of `evals`;
for `type = "custom"` its `import_path`).

A backend takes prompt token ids and returns sampled token ids, the engine's logprob of each (the behaviour policy
of the loss, docs/design.md invariant 2) and the policy version that sampled them. Built in, one module each:

| name | module | what |
|---|---|---|
| `server` | `prime_rl.inference.client:InferenceClient` | prime-rl's inference server(s) (vLLM) over HTTP; loads new weights |
| `transformers` | `prime_rl.inference.local_client:TransformersClient` | in-process transformers `generate`; eval only |

A new engine is one module with a class that satisfies `InferenceBackend` (including `from_config`) and one
`BACKENDS` entry (docs/extending.md). The orchestrator refuses a backend whose `loads_weights` is False: it could
never sample from the policy the trainer publishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from prime_rl.config.orchestrator import SamplingConfig
from prime_rl.registry import Registry, RegistryError

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import EvalCommandConfig, OrchestratorConfig
    from prime_rl.config.teacher import TeacherConfig


@dataclass
class GenerateResult:
    """One sampled completion.

    prompt_ids: the prompt as sent; completion_ids: sampled ids (the stop token included when one ended it);
    logprobs: one per completion token, log_softmax(logits / T) of the sampled token (natural log);
    finish_reason: "stop" | "length" | "abort"; policy_version: the oldest weight version that sampled any of its
    tokens (0 = the base model).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    policy_version: int


class InferenceError(RuntimeError):
    """A request failed for good (refused, or retries exhausted). The message names the engine and what failed."""


def completion_budget(prompt_ids: list[int], sampling: SamplingConfig, max_tokens: int | None) -> int:
    """The most tokens one `generate` call may sample: `max_tokens`, else `sampling.max_completion_tokens`.
    Raises ValueError on an empty prompt or a budget < 1 (shared by every backend)."""
    if not prompt_ids:
        raise ValueError("generate: prompt_ids is empty")
    budget = sampling.max_completion_tokens if max_tokens is None else max_tokens
    if budget < 1:
        raise ValueError(f"generate: max_tokens must be >= 1, got {budget}")
    return budget


@runtime_checkable
class InferenceBackend(Protocol):
    """An engine that samples the policy, token-in/token-out.

    `loads_weights`: whether `update_weights` works (the orchestrator needs it; an eval does not).
    """

    loads_weights: ClassVar[bool]

    @classmethod
    def from_config(cls, cfg: OrchestratorConfig | EvalCommandConfig) -> InferenceBackend:
        """Build the backend from a command's config (its `client`, `model`, ... sections)."""
        ...

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingConfig,
        *,
        rollout_id: str | None = None,
        stop_token_ids: list[int] | None = None,
        max_tokens: int | None = None,
    ) -> GenerateResult:
        """Sample one completion of `prompt_ids` (see `GenerateResult`); every request of one `rollout_id` may go
        to the same engine replica (prefix cache). Stops at the model's eos ids, `stop_token_ids` and `max_tokens`
        (default `sampling.max_completion_tokens`). Raises ValueError on an empty prompt or max_tokens < 1,
        InferenceError when the engine fails."""
        ...

    async def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Return once the engine can sample (default timeout: the backend's own setting). Raises TimeoutError
        naming what it waited for."""
        ...

    async def check_model(self, name: str) -> None:
        """Raise ValueError unless the samples come from model `name` (the tokenizer and results are named by it)."""
        ...

    async def update_weights(self, path: str, version: int) -> None:
        """Sample from the policy in `path` (`weights/step_N/`) as `version` from now on. Raises InferenceError
        (or NotImplementedError where `loads_weights` is False)."""
        ...

    def check_alive(self) -> None:
        """Return while the engine can still sample; raise (the server backend: `NoReplicaLeft`, a RuntimeError
        naming each replica and why it is down) once it never will again in this run."""
        ...

    async def context_length(self) -> int | None:
        """The most tokens (prompt plus completion) one sequence may hold in the engine, or None when the engine
        does not say (then the orchestrator's `seq_len` is not checked against it)."""
        ...

    async def aclose(self) -> None:
        """Release connections, threads and models."""
        ...


BACKENDS: Registry[type[InferenceBackend]] = Registry("inference backend", "backend", {
    "server": "prime_rl.inference.client:InferenceClient",
    "transformers": "prime_rl.inference.local_client:TransformersClient",
})


def backend_name(cfg: OrchestratorConfig | EvalCommandConfig) -> str:
    """The `BACKENDS` name of `cfg`'s backend: `backend.type` (for `type = "custom"` its `import_path`), in the
    orchestrator's config and in `evals`'."""
    backend = cfg.backend
    return backend.import_path if backend.type == "custom" else backend.type


def build_backend(cfg: OrchestratorConfig | EvalCommandConfig, *, loads_weights: bool = False) -> InferenceBackend:
    """The backend `cfg.backend` names (`backend_name`), built from `cfg`. With `loads_weights`, refuse one that
    cannot load new policy versions.

    Raises:
        RegistryError (a ValueError): unknown backend, or one that cannot load weights when that is needed
            (names the field and the choices).
    """
    name = backend_name(cfg)
    cls = BACKENDS.get(name)
    if loads_weights and not cls.loads_weights:
        able = [n for n in BACKENDS.names() if getattr(BACKENDS.get(n), "loads_weights", False)]
        raise RegistryError(
            f"backend = {name!r}: this backend cannot load new policy versions, so training could never "
            f"sample from the trained policy; choose one that can: {', '.join(able)}"
        )
    return cls.from_config(cfg)


class ServedModelMismatch(ValueError):
    """The inference server serves another model than `model.name`: a user error (the config or the server's
    `--model.name` is wrong), reported without a traceback."""


class TeacherMismatch(ValueError):
    """The teacher cannot score the student's tokens: another tokenizer, another served model, a shorter context."""


class Scorer(Protocol):
    """Scores token sequences under a frozen model: on-policy distillation's teacher (`[orchestrator.teacher]`)."""

    async def check(self, tokenizer: Any, student: str, seq_len: int) -> None:
        """Refuse a server that cannot score the student's tokens (TeacherMismatch, TimeoutError)."""
        ...

    async def prompt_logprobs(self, ids: list[int], key: str | None = None) -> list[float]:
        """log q(ids[t] | ids[:t]) for every position ([T]; position 0: 0.0). Raises InferenceError,
        NoReplicaLeft."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


SCORERS: Registry[type[Scorer]] = Registry("teacher scorer", "orchestrator.teacher", {
    "vllm": "prime_rl.inference.scoring:PromptScorer",
})


def build_scorer(cfg: TeacherConfig) -> Scorer:
    """The client that scores token sequences on the teacher server(s) of `[orchestrator.teacher]` (`SCORERS`:
    vLLM's prompt logprobs, `prime_rl.inference.scoring.PromptScorer`)."""
    return SCORERS.get("vllm")(cfg)


def __getattr__(name: str):
    """`NoReplicaLeft` (every server of a pool is down), importable from this seam without importing the pool
    module at start-up."""
    if name == "NoReplicaLeft":
        from prime_rl.inference.pool import NoReplicaLeft

        return NoReplicaLeft
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
