"""Request bodies and failure names of the NeMo Gym resources-server protocol, as nemo-gym 0.7 defines them.

The source of truth is the `nemo-gym` package (`nemo_gym.base_resources_server`, `nemo_gym.episode_types`,
`nemo_gym.failure_kinds`); `tests/interop/` checks these models against it. Bodies allow extra fields wherever
NeMo Gym's rows may carry them (a row is `responses_create_params` plus whatever its verifier needs); the 0.7
session bodies forbid them, as NeMo Gym's do.

Two seed bodies exist:
- the row itself (what NeMo Gym's SimpleAgent `/run`, verifiers' `nemo-gym` taskset and our client send), answered
  `{}` with a session cookie;
- `ResourcesSeedSessionRequest` (`resources_session_id`, `episode_id {rollout_id, attempt}`, `task_id {taskset,
  task_id}`, `task_data`), sent by NeMo Gym 0.7's Environment Servers, answered `{resources_session_id}` with a
  session cookie. Re-seeding the same id for the same episode returns the same session; seeding an id after it
  was closed is refused.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# NeMo Gym's registered failure kinds (nemo_gym/failure_kinds.py) that this server produces.
SESSION_LOST = "session_lost"  # no, unknown, forged or closed session (or the server restarted)
SESSION_EXPIRED = "session_expired"  # idle timeout
VERIFIER_ERROR = "verifier_error"  # the environment crashed, or could not measure the episode
PROVIDER_QUOTA_EXHAUSTED = "provider_quota_exhausted"  # no capacity slot freed before the seed deadline
SHUTDOWN = "shutdown"  # the server stopped while the session was open
FAILURE_KINDS = frozenset({SESSION_LOST, SESSION_EXPIRED, VERIFIER_ERROR, PROVIDER_QUOTA_EXHAUSTED, SHUTDOWN})

# Keys the verify answer sets itself; an environment metric of the same name stays only under `metrics`.
VERIFY_KEYS = frozenset({"response", "reward", "mask_sample", "failure_kind", "failure_reason", "metrics"})


class ResponsesCreateParams(BaseModel):
    """The part of `responses_create_params` this server reads (other Responses-API fields pass through)."""

    model_config = ConfigDict(extra="allow")

    input: list[dict[str, Any]] | str
    tools: list[dict[str, Any]] | None = None


class Row(BaseModel):
    """A NeMo Gym row as a seed or verify body: `responses_create_params` plus any fields the verifier needs.
    `info` (our rows: what rebuilds the episode), `task_id`, `split` and `index` are optional."""

    model_config = ConfigDict(extra="allow")

    responses_create_params: ResponsesCreateParams | None = None
    info: dict[str, Any] | None = None
    task_id: Any = None
    split: str | None = None
    index: int | None = Field(None, strict=True)


class VerifyBody(Row):
    """`/verify`: the row plus the model's `response` (a Responses API object; a message object or a string are
    accepted too). `final_response` is the older name of `response`."""

    response: dict[str, Any] | str | None = None
    final_response: dict[str, Any] | str | None = None


class EpisodeId(BaseModel):
    """One attempt of one rollout (nemo_gym.episode_types.EpisodeId)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rollout_id: str = Field(min_length=1)
    attempt: int = Field(0, ge=0)


class TaskId(BaseModel):
    """A task within a taskset (nemo_gym.episode_types.TaskId)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    taskset: str = Field(min_length=1)
    task_id: str = Field(min_length=1)


class SessionSeed(BaseModel):
    """NeMo Gym 0.7's `ResourcesSeedSessionRequest`: the caller names the session."""

    model_config = ConfigDict(extra="forbid")

    resources_session_id: str = Field(min_length=1)
    episode_id: EpisodeId
    task_id: TaskId
    task_data: dict[str, Any]


class CloseBody(BaseModel):
    """`/close_session`: NeMo Gym 0.7's `{resources_session_id, episode_id}`, or an empty body (the session cookie
    names the session)."""

    model_config = ConfigDict(extra="allow")

    resources_session_id: str | None = None
    episode_id: EpisodeId | None = None


class AggregateBody(BaseModel):
    """`/aggregate_metrics`: verify answers, each with `reward` and (optionally) `_ng_task_index`, `mask_sample`."""

    verify_responses: list[dict[str, Any]]


def masked_result(kind: str, reason: str) -> dict[str, Any]:
    """A verify answer for an episode that could not be measured: reward 0 with `mask_sample` (the sample is left
    out of training), NeMo Gym's `failure_kind` (e.g. `verifier_error`) and a readable `failure_reason`."""
    return {"reward": 0.0, "mask_sample": True, "failure_kind": kind, "failure_reason": reason, "metrics": {}}
