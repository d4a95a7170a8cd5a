"""Configuration of the orchestrator (`orchestrator`) and of standalone evaluation (`eval`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig, CheckpointConfig, LogConfig, ModelConfig, WandbConfig


class ClientConfig(BaseConfig):
    """How the orchestrator reaches the inference server(s)."""

    base_url: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000"],
        description="One URL per inference server (data-parallel: round robin, sticky per rollout).",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="Read timeout of one generate request.")
    connect_timeout_s: float = Field(10.0, gt=0)
    max_retries: int = Field(5, ge=0, description="Retries on 5xx and transport errors (exponential backoff).")
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for the servers' /health at start.")
    api_key: str | None = None


class SamplingConfig(BaseConfig):
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, description="-1 disables top-k.")
    max_completion_tokens: int = Field(512, gt=0, description="Per model turn.")
    seed: int | None = None


class EvalSamplingConfig(SamplingConfig):
    temperature: float = Field(
        1.0, ge=0, description="0 = greedy decoding (argmax): a deterministic eval, as verl's validation default."
    )


class HarnessConfig(BaseConfig):
    id: Literal["null"] = Field("null", description="null = plain chat loop with native (hermes) tool calls.")


class RuntimeConfig(BaseConfig):
    type: Literal["subprocess", "inprocess"] = Field(
        "subprocess", description="Where the agent harness runs; the null harness runs in the orchestrator either way."
    )


class AgentConfig(BaseConfig):
    harness: HarnessConfig = HarnessConfig()
    max_turns: int = Field(8, gt=0, description="Cap on model turns per rollout.")
    runtime: RuntimeConfig = RuntimeConfig()


class ResourcesTaskConfig(BaseConfig):
    """A NeMo Gym resources server the rows are played against."""

    resources_url: str = "http://127.0.0.1:9100"
    request_timeout: float = Field(600.0, gt=0, description="Seconds per request (separate from connect).")
    connect_timeout: float = Field(10.0, gt=0)
    retry_deadline_s: float = Field(120.0, gt=0, description="Retry 503 / transport errors with backoff up to this.")
    token: str | None = Field(None, description="Bearer token when the server was started with --token.")


class TasksetConfig(BaseConfig):
    id: Literal["nemo-gym"] = "nemo-gym"
    dataset: Path = Field(description="JSONL of rows (responses_create_params, task_id, split, index).")
    eval_dataset: Path | None = Field(None, description="Eval rows; default: eval.jsonl beside `dataset`.")
    task: ResourcesTaskConfig = ResourcesTaskConfig()


class EnvConfig(BaseConfig):
    """One environment: a built-in one by `id`, or a remote taskset."""

    id: str | None = Field(None, description="Built-in environment: gridsim, reverse-text.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the built-in environment.")
    taskset: TasksetConfig | None = None
    agent: AgentConfig = AgentConfig()

    @model_validator(mode="after")
    def _one_kind(self) -> EnvConfig:
        if (self.id is None) == (self.taskset is None):
            raise ValueError("set exactly one of `env.id` (built-in) or `env.taskset` (remote NeMo Gym rows)")
        return self


class SourceConfig(BaseConfig):
    name: str = "default"
    ratio: float = Field(1.0, gt=0, description="Relative share of this source's tasks in the train stream.")
    env: EnvConfig = EnvConfig(id="gridsim")


class TrainSamplingConfig(BaseConfig):
    group_size: int = Field(8, gt=0, description="Rollouts per task.")
    sampling: SamplingConfig = SamplingConfig()
    source: list[SourceConfig] = Field(default_factory=lambda: [SourceConfig()])


class EvalConfig(BaseConfig):
    interval: int | None = Field(None, gt=0, description="Eval every N steps (and on the base policy); None = never.")
    num_examples: int | None = Field(None, gt=0, description="Eval tasks per source; None = the whole eval split.")
    rollouts_per_example: int = Field(1, gt=0)
    pass_threshold: float = Field(1.0, description="A rollout passes (pass@k) when its reward is at least this.")
    sampling: EvalSamplingConfig = EvalSamplingConfig(temperature=1.0)
    source: list[SourceConfig] | None = Field(None, description="Default: the train sources, eval split.")


class AdvantageConfig(BaseConfig):
    """Group-relative advantage (GRPO: Shao et al. 2024, arXiv:2402.03300)."""

    type: str = Field("grpo", description="Registered algorithm: grpo, rloo, ... or `module:function`.")
    std_normalize: bool = Field(False, description="Divide by the group's reward std (original GRPO).")
    filter_zero: bool = Field(False, description="Drop groups whose advantages are all zero.")


class ConcurrencyConfig(BaseConfig):
    max_inflight: int = Field(32, gt=0, description="Rollouts running at once.")


class RendererConfig(BaseConfig):
    name: str = Field("qwen3", description="Chat renderer (the `renderers` package) matching the model's format.")
    enable_thinking: bool = False


class OrchestratorConfig(BaseConfig):
    """`orchestrator @ config`: plays rollouts, scores groups, packs batches for the trainer."""

    model: ModelConfig = ModelConfig()
    backend: str = Field(
        "server",
        description="Inference backend (prime_rl.inference.backend): server = the inference server(s) at "
        "client.base_url. It must load new policy versions; `transformers` cannot (eval only).",
    )
    client: ClientConfig = ClientConfig()
    renderer: RendererConfig = RendererConfig()
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    train: TrainSamplingConfig = TrainSamplingConfig()
    eval: EvalConfig = EvalConfig()
    advantage: AdvantageConfig = AdvantageConfig()
    ckpt: CheckpointConfig = CheckpointConfig()
    wandb: WandbConfig | None = None
    log: LogConfig = LogConfig()

    output_dir: Path = Path("outputs/run")
    batch_size: int = Field(32, gt=0, description="Rollouts per step (a multiple of group_size).")
    max_steps: int | None = Field(None, gt=0)
    seq_len: int = Field(2048, gt=0, description="Max tokens per rollout sample and per packed micro-batch.")
    max_async_level: int = Field(1, ge=0, description="Steps the orchestrator may run ahead of the trainer.")
    max_off_policy_steps: int = Field(8, ge=0, description="Drop rollouts (and their group) older than this.")
    num_train_ranks: int = Field(1, gt=0, description="Trainer data-parallel ranks (one rank_R.bin each).")
    traces_per_step: int = Field(4, ge=0, description="Readable rollouts written to traces.jsonl per step.")
    weights_timeout_s: float = Field(1800.0, gt=0, description="How long to wait for a policy version.")
    seed: int = 0
    dry_run: bool = False

    @model_validator(mode="after")
    def _batch_multiple_of_group(self) -> OrchestratorConfig:
        if self.batch_size % self.train.group_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of train.group_size ({self.train.group_size})"
            )
        return self


class LocalBackendConfig(BaseConfig):
    """`eval --backend transformers`: sampling in the eval process itself (transformers `generate`)."""

    max_batch: int = Field(64, gt=0, description="Most concurrent requests sampled in one generate call.")
    threads: int | None = Field(None, gt=0, description="torch threads (default: torch's choice).")


class EvalCommandConfig(BaseConfig):
    """`eval @ config`: evaluate a model on environments' eval splits, with a results table."""

    model: ModelConfig = ModelConfig()
    backend: str = Field(
        "server",
        description="Inference backend (prime_rl.inference.backend): server = the inference server(s) at "
        "client.base_url serve model.name; transformers = load model.name in this process and sample with "
        "transformers generate (no server; slower per token); or a registered name / module:Class.",
    )
    local: LocalBackendConfig = LocalBackendConfig()
    client: ClientConfig = ClientConfig()
    renderer: RendererConfig = RendererConfig()
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    eval: EvalConfig = EvalConfig(source=[SourceConfig()])
    log: LogConfig = LogConfig()
    output_dir: Path = Path("outputs/eval")
    seq_len: int = Field(2048, gt=0)
    seed: int = 0
    dry_run: bool = False
