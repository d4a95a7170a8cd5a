"""Configuration of `prime-rl plan`: the deployment simulator's inputs (prime_rl.simulate)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig


class PlanInferenceConfig(BaseConfig):
    """Inference replicas (vLLM servers): continuous batching, decode speed as a function of the sequences in flight.

    A decode iteration with b sequences takes `t(b) = t0 + t1 * b` seconds and gives each of them one token; `t0`
    and `t1` come from two measured points: one sequence alone at `single_seq_tokens_per_s`, and `peak_batch`
    sequences together at `peak_tokens_per_s` (all sequences' tokens per second). Prefill runs at
    `prefill_tokens_per_s` after `request_overhead_s` and holds the replica's decoding meanwhile (no chunked prefill).
    `benchmarks/plan_inputs.py` measures all five on a vLLM server."""

    replicas: int = Field(1, gt=0, description="Inference servers (data-parallel replicas).")
    gpus_per_replica: int = Field(1, gt=0, description="GPUs per replica (tensor x data parallel size), for GPU counts.")
    single_seq_tokens_per_s: float = Field(100.0, gt=0, description="Decode tokens/s of one sequence alone.")
    peak_tokens_per_s: float = Field(
        2000.0, gt=0, description="Decode tokens/s of all sequences together with `peak_batch` sequences in flight."
    )
    peak_batch: int = Field(
        64, gt=0, description="Sequences in flight at `peak_tokens_per_s`; also the most a replica decodes at once "
        "(vLLM's max_num_seqs); more wait in its queue."
    )
    prefill_tokens_per_s: float = Field(
        50_000.0, gt=0, description="Prompt tokens/s of prefill (new tokens of each turn: the prompt, then tool results)."
    )
    request_overhead_s: float = Field(
        0.0, ge=0, description="Serial seconds per request before its prefill (HTTP, tokenising, scheduling), holding "
        "the replica's decoding like a prefill."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PlanInferenceConfig:
        if self.peak_batch > 1 and self.peak_tokens_per_s > self.peak_batch * self.single_seq_tokens_per_s:
            raise ValueError(
                f"inference.peak_tokens_per_s ({self.peak_tokens_per_s:g}) is above peak_batch x "
                f"single_seq_tokens_per_s ({self.peak_batch} x {self.single_seq_tokens_per_s:g}): a batch cannot make "
                "each sequence faster than it runs alone; raise single_seq_tokens_per_s or lower peak_tokens_per_s"
            )
        return self


class PlanTrainerConfig(BaseConfig):
    """The trainer (all its ranks together): one optimizer step takes `step_fixed_s + tokens * s_per_token`."""

    gpus: int = Field(1, gt=0, description="Trainer GPUs, for GPU counts and idle fractions.")
    tokens_per_s: float = Field(
        10_000.0, gt=0, description="Trained tokens/s (prompt + completion) of all ranks together."
    )
    step_fixed_s: float = Field(0.0, ge=0, description="Seconds per step independent of its tokens (optimizer, logging).")


class PlanWeightsConfig(BaseConfig):
    """Moving each policy version from the trainer to inference."""

    transport: Literal["filesystem", "broadcast"] = Field(
        "filesystem", description="filesystem: the trainer writes the version (publish_s), then every replica reads "
        "and loads it (load_s); broadcast: both happen at once (a collective), the trainer busy publish_s and the "
        "replicas paused load_s from the end of the step."
    )
    publish_s: float = Field(0.0, ge=0, description="Trainer seconds to write or send one version.")
    load_s: float = Field(
        0.0, ge=0, description="Seconds each replica pauses to load one version (no token sampled meanwhile)."
    )


class PlanEnvConfig(BaseConfig):
    """The environment: its answer to each turn (tool call, verify) takes this long, with no GPU or control-plane CPU."""

    latency_s: float = Field(0.0, ge=0, description="Mean seconds per turn of environment latency.")
    latency_cv: float = Field(0.0, ge=0, description="Coefficient of variation of that latency (gamma-distributed).")


class PlanControlPlaneConfig(BaseConfig):
    """The orchestrator's CPU work, on two kinds of FIFO servers (one core each, first come, first served):

    - the agent loop (rendering, HTTP to inference, tool parsing, the environment's client side): each turn of a
      rollout costs `cpu_per_turn_s` CPU seconds on one of `workers` processes (a group's rollouts share one);
    - the scheduler, the one orchestrator process however many workers there are: each finished rollout costs
      `scheduler_cpu_per_rollout_s` CPU seconds there (result decoding, admission, packing, rank files, archive)
      before its group can be cut into a batch; its rollout holds a `max_inflight` slot until then. One scheduler
      bounds the deployment at `1 / scheduler_cpu_per_rollout_s` rollouts/s.

    Without rollout workers (`orchestrator.workers.count = 0`) both run in one process: model it with `workers = 1`,
    the whole cost per turn in `cpu_per_turn_s` and `scheduler_cpu_per_rollout_s = 0`."""

    workers: int = Field(1, gt=0, description="Control-plane worker processes (one core each).")
    cpu_per_turn_s: float = Field(0.0, ge=0, description="CPU seconds per rollout turn on a worker.")
    scheduler_cpu_per_rollout_s: float = Field(
        0.0, ge=0, description="CPU seconds per finished rollout in the one scheduler (orchestrator) process; 0: free."
    )


class PlanWorkloadConfig(BaseConfig):
    """The rollouts: prompt, turns and tokens per turn (seeded draws)."""

    prompt_tokens: int = Field(256, ge=0, description="Tokens of the first prompt.")
    turns: int = Field(1, gt=0, description="Most turns per rollout.")
    turns_min: int | None = Field(
        None, gt=0, description="Fewest turns; each rollout draws its count uniformly in [turns_min, turns] (unset: "
        "every rollout has `turns`)."
    )
    completion_tokens: float = Field(128.0, gt=0, description="Mean sampled tokens per turn.")
    completion_tokens_cv: float = Field(0.0, ge=0, description="Coefficient of variation of tokens per turn (gamma).")
    max_completion_tokens: int | None = Field(None, gt=0, description="Cap on tokens per turn (the sampling limit).")
    env_tokens: int = Field(0, ge=0, description="Tokens each environment answer adds to the context (next prefill).")

    @model_validator(mode="after")
    def _turns(self) -> PlanWorkloadConfig:
        if self.turns_min is not None and self.turns_min > self.turns:
            raise ValueError(f"workload.turns_min ({self.turns_min}) is above workload.turns ({self.turns})")
        return self


class PlanPipelineConfig(BaseConfig):
    """The orchestrator's scheduling, as in `orchestrator` (same names and meaning)."""

    batch_size: int = Field(64, gt=0, description="Rollouts per step.")
    group_size: int = Field(8, gt=0, description="Rollouts per group (one task).")
    max_async_level: int = Field(1, ge=0, description="Steps the orchestrator may run ahead of the trainer.")
    max_off_policy_steps: int = Field(8, ge=0, description="Drop groups older than this at the cut.")
    max_inflight: int = Field(64, gt=0, description="Rollouts running at once.")

    @model_validator(mode="after")
    def _groups(self) -> PlanPipelineConfig:
        if self.batch_size % self.group_size:
            raise ValueError(
                f"pipeline.batch_size ({self.batch_size}) must be a multiple of pipeline.group_size ({self.group_size})"
            )
        return self


class PlanConfig(BaseConfig):
    """`prime-rl plan`: simulate an asynchronous RL deployment (inference replicas, orchestrator, trainer, weight
    transfer, environment, control plane) and print its step time, throughput, GPU idle fractions and off-policy
    distribution; `--capacity` prints the capacity table of a 4B model instead (docs/scaling.md)."""

    inference: PlanInferenceConfig = Field(default_factory=PlanInferenceConfig, description="Inference replicas.")
    trainer: PlanTrainerConfig = Field(default_factory=PlanTrainerConfig, description="The trainer.")
    weights: PlanWeightsConfig = Field(default_factory=PlanWeightsConfig, description="Weight transfer.")
    env: PlanEnvConfig = Field(default_factory=PlanEnvConfig, description="Environment latency.")
    control_plane: PlanControlPlaneConfig = Field(
        default_factory=PlanControlPlaneConfig, description="Orchestrator CPU."
    )
    workload: PlanWorkloadConfig = Field(default_factory=PlanWorkloadConfig, description="Rollout shape.")
    pipeline: PlanPipelineConfig = Field(default_factory=PlanPipelineConfig, description="Orchestrator scheduling.")
    steps: int = Field(30, gt=0, description="Trainer steps to simulate.")
    warmup_steps: int = Field(
        3, ge=0, description="First steps left out of the reported averages (the pipeline fills up)."
    )
    seed: int = Field(0, description="Seed of the workload's draws (turns, tokens, latencies).")
    capacity: bool = Field(False, description="Print the 4B-model capacity table (8 to 1,024 GPUs) instead.")
    json_out: Path | None = Field(None, description="Also write the result as JSON to this file.")

    @model_validator(mode="after")
    def _warmup(self) -> PlanConfig:
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be below steps ({self.steps})")
        return self
