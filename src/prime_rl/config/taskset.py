"""Where a source's tasks come from (`[[...source]] env`): a built-in environment or a remote taskset (NeMo Gym
rows, a verifiers taskset), as tagged unions whose tag (`kind`) is inferred from the keys a config writes, and the
agent loop that plays them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from prime_rl.config.base import BaseConfig, DatasetSource


class HarnessConfig(BaseConfig):
    """The agent harness that turns model output into tool calls."""

    id: Literal["null"] = Field("null", description="null = plain chat loop with native (hermes) tool calls.")


class RuntimeConfig(BaseConfig):
    """Where the harness runs (kept for the reference system's configs)."""

    type: Literal["subprocess", "inprocess"] = Field(
        "subprocess", description="Where the agent harness runs; the null harness runs in the orchestrator either way."
    )


class AgentConfig(BaseConfig):
    """The multi-turn agent loop of one rollout."""

    harness: HarnessConfig = Field(HarnessConfig(), description="Tool-call harness.")
    max_turns: int = Field(8, gt=0, description="Cap on model turns per rollout.")
    runtime: RuntimeConfig = Field(RuntimeConfig(), description="Where the harness runs.")


class ResourcesTaskConfig(BaseConfig):
    """A NeMo Gym resources server the rows are played against."""

    resources_url: str = Field("http://127.0.0.1:9100", description="Base URL of the resources server.")
    request_timeout_s: float = Field(
        600.0, gt=0, validation_alias=AliasChoices("request_timeout_s", "request_timeout"),
        description="Seconds per request, separate from connect (also accepted as `request_timeout`).",
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, validation_alias=AliasChoices("connect_timeout_s", "connect_timeout"),
        description="TCP connect timeout per request, seconds (also accepted as `connect_timeout`).",
    )
    retry_deadline_s: float = Field(120.0, gt=0, description="Retry 503 / transport errors with backoff up to this.")
    token: str | None = Field(None, description="Bearer token when the server was started with --token.")


_NEMO_GYM_KEYS = ("dataset", "name", "subset", "split", "columns", "eval_dataset", "eval_split", "task")


class NemoGymTasksetConfig(DatasetSource):
    """`env.taskset.id = "nemo-gym"` (the default): task rows played against a NeMo Gym resources server: a local
    file (`dataset`) or a Hugging Face dataset (`name`), and the server (`task`)."""

    kind: Literal["nemo-gym"] = Field(
        "nemo-gym", description="Taskset kind; inferred from `id` (nemo-gym rows), never needs writing."
    )
    id: Literal["nemo-gym"] = Field("nemo-gym", description="nemo-gym: rows against a NeMo Gym resources server.")
    dataset: Path | None = Field(
        None,
        description="Local rows (responses_create_params or prompt, task_id, ...): .jsonl, or "
        ".parquet/.arrow/.csv/.json through datasets.",
    )
    eval_dataset: Path | None = Field(None, description="Eval rows; default: eval.jsonl beside `dataset`.")
    eval_split: str | None = Field(None, description="With `name`: the split of eval rows (e.g. test).")
    task: ResourcesTaskConfig = Field(ResourcesTaskConfig(), description="The resources server.")

    @model_validator(mode="before")
    @classmethod
    def _no_verifiers_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and (data.get("args") or data.get("eval_args")):
            raise ValueError("env.taskset.args/eval_args configure a verifiers taskset, not nemo-gym rows")
        if isinstance(data, dict) and ("args" in data or "eval_args" in data):
            data = {k: v for k, v in data.items() if k not in ("args", "eval_args")}
        return data

    @model_validator(mode="after")
    def _one_source(self) -> NemoGymTasksetConfig:
        if (self.dataset is None) == (self.name is None):
            raise ValueError("set exactly one of `dataset` (a local rows file) and `name` (a Hugging Face dataset)")
        if self.name is not None and self.eval_dataset is not None:
            raise ValueError("`eval_dataset` goes with `dataset`; with `name`, set `eval_split`")
        if self.name is None and self.eval_split is not None:
            raise ValueError("`eval_split` goes with `name`; with `dataset`, set `eval_dataset`")
        return self


class VerifiersTasksetConfig(BaseConfig):
    """`env.taskset.id = "<id>"` (any id but nemo-gym): an installed verifiers v1 taskset (configured by `args`, its
    eval split by `eval_args`), played by our agent loop (`prime_rl.orchestrator.sources.verifiers_taskset`)."""

    kind: Literal["verifiers"] = Field(
        "verifiers", description="Taskset kind; inferred from `id` (any id but nemo-gym), never needs writing."
    )
    id: str = Field(min_length=1, description="The id of an installed verifiers taskset.")
    args: dict[str, Any] = Field(default_factory=dict, description="The taskset's config fields.")
    eval_args: dict[str, Any] | None = Field(None, description="Config of the eval split.")

    @model_validator(mode="before")
    @classmethod
    def _no_nemo_gym_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            wrong = [k for k in _NEMO_GYM_KEYS if data.get(k) not in (None, {}, [])]
            if wrong:
                raise ValueError(f"env.taskset.{wrong[0]} does not apply to taskset id {data.get('id')!r} (a "
                                 "verifiers taskset takes args/eval_args; dataset/name/task are nemo-gym's)")  # fmt: skip
        return data


def taskset_kind(data: Any) -> Any:
    """Infer `kind` of an `env.taskset` table from its `id`: nemo-gym (the default id) or verifiers (any other), so
    configs never write the tag; a table that states `kind` keeps it."""
    if isinstance(data, dict) and "kind" not in data:
        return {**data, "kind": "nemo-gym" if data.get("id", "nemo-gym") == "nemo-gym" else "verifiers"}
    return data


TasksetConfig = Annotated[NemoGymTasksetConfig | VerifiersTasksetConfig, Field(discriminator="kind")]
"""A remote taskset, chosen by `id`: NeMo Gym rows (`nemo-gym`) or an installed verifiers taskset (any other id)."""


class BuiltinEnvConfig(BaseConfig):
    """A built-in environment (`env.id`, with keyword arguments `env.args`), played in the orchestrator process."""

    kind: Literal["builtin"] = Field(
        "builtin", description="Environment kind; inferred (`env.id` set), never needs writing."
    )
    id: str = Field(min_length=1, description="Built-in environment (gridsim, reverse-text, digit-bandit, tool-bandit, reasoning-gym, textarena), another registered name, or module:attr.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the built-in environment.")
    agent: AgentConfig = Field(AgentConfig(), description="The agent loop.")

    @property
    def taskset(self) -> None:
        """A built-in environment has no remote taskset."""
        return None


class TasksetEnvConfig(BaseConfig):
    """A remote taskset (`env.taskset`): NeMo Gym rows or a verifiers taskset."""

    kind: Literal["remote"] = Field(
        "remote", description="Environment kind; inferred (`env.taskset` set), never needs writing."
    )
    taskset: TasksetConfig = Field(description="NeMo Gym rows (id nemo-gym) or a verifiers taskset (its id).")
    agent: AgentConfig = Field(AgentConfig(), description="The agent loop.")

    @field_validator("taskset", mode="before")
    @classmethod
    def _taskset_kind(cls, value: Any) -> Any:
        return taskset_kind(value)

    @property
    def id(self) -> None:
        """A remote taskset names no built-in environment."""
        return None

    @property
    def args(self) -> dict[str, Any]:
        """A remote taskset takes no built-in environment arguments."""
        return {}


def env_kind(data: Any) -> Any:
    """Infer `kind` of an `env` table from its shape: `env.id` -> builtin, `env.taskset` -> remote, so configs
    never write the tag. Raises ValueError unless exactly one of the two is set."""
    if not isinstance(data, dict) or "kind" in data:
        return data
    has_id, has_taskset = data.get("id") is not None, data.get("taskset") is not None
    if has_id == has_taskset:
        raise ValueError("set exactly one of `env.id` (built-in) or `env.taskset` (remote NeMo Gym rows or a "
                         "verifiers taskset)")  # fmt: skip
    out = {k: v for k, v in data.items() if v is not None or k not in ("id", "taskset")}
    return {**out, "kind": "builtin" if has_id else "remote"}


EnvConfig = Annotated[BuiltinEnvConfig | TasksetEnvConfig, Field(discriminator="kind")]
"""One environment, chosen by its shape: a built-in one (`env.id`) or a remote taskset (`env.taskset`)."""
