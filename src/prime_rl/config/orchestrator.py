"""Configuration of the orchestrator (`orchestrator`) and of standalone evaluation (`evals`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from prime_rl.config.advantage import (  # noqa: F401 - the advantage configs, importable from here too
    AdvantageConfig,
    CustomAdvantageConfig,
    GRPOAdvantageConfig,
    MaxRLAdvantageConfig,
    RLOOAdvantageConfig,
    legacy_advantage_type,
    merged_advantage,
    unused_global_advantage_problem,
)
from prime_rl.config.archive import ArchiveConfig
from prime_rl.config.base import BaseConfig, CheckpointConfig, LogConfig, ModelConfig, WandbConfig
from prime_rl.config.client import ClientConfig
from prime_rl.config.eval_backend import BackendConfig, ServerBackendConfig, backend_from_flat
from prime_rl.config.eval_sweep import EvalCheckpointsConfig
from prime_rl.config.metrics_server import MetricsServerConfig
from prime_rl.config.orchestrator_backend import (
    OrchestratorBackendConfig,
    ServerClientBackendConfig,
    backend_from_name,
    client_problem,
)
from prime_rl.config.recipes import (
    SIGNAL_DECIDED_BY_RL,
    CurriculumConfig,
    GateConfig,
    lone_group_problem,
    recipe_problem,
)
from prime_rl.config.rollout_transport import RolloutTransportConfig
from prime_rl.config.sources import (  # noqa: F401 - the source configs, importable from here too
    TRAIN_ONLY,
    EvalSamplingConfig,
    EvalSourceConfig,
    SamplingConfig,
    SourceConfig,
    TaskSourceConfig,
    refuse_all_examples_spelling,
    unique_source_names,
    unscheduled_eval_problem,
)
from prime_rl.config.taskset import (  # noqa: F401 - the env/taskset configs, importable from here too
    AgentConfig,
    BuiltinEnvConfig,
    EnvConfig,
    HarnessConfig,
    NemoGymTasksetConfig,
    ResourcesTaskConfig,
    RuntimeConfig,
    TasksetConfig,
    TasksetEnvConfig,
    VerifiersTasksetConfig,
    env_kind,
    taskset_kind,
)
from prime_rl.config.teacher import TeacherConfig
from prime_rl.config.weight_transport import WeightTransportConfig
from prime_rl.config.workers import ConcurrencyConfig, WorkersConfig


class TrainSamplingConfig(BaseConfig):
    """Training rollouts: groups, sampling, sources."""

    group_size: int = Field(8, gt=0, description="Rollouts per task (a source's own group_size overrides it).")
    sampling: SamplingConfig = Field(SamplingConfig(), description="Sampling of training rollouts.")
    source: list[SourceConfig] = Field(default_factory=lambda: [SourceConfig()], description="Task sources.")

    _unique_names = field_validator("source")(unique_source_names)

    @model_validator(mode="after")
    def _merge_source_sampling(self) -> TrainSamplingConfig:
        """A source's `sampling` holds the fields set on it over `train.sampling` (resolved here, so the config `rl`
        writes for the orchestrator carries the merged values)."""
        for src in self.source:
            if src.sampling is not None:
                own = src.sampling.model_dump(exclude_unset=True)
                src.sampling = SamplingConfig(**(self.sampling.model_dump() | own))
        return self

    @model_validator(mode="after")
    def _untruncated(self) -> TrainSamplingConfig:
        bad = []
        named = [("train.sampling", self.sampling)]
        named += [(f"train.source.{i}.sampling", src.sampling) for i, src in enumerate(self.source) if src.sampling]
        for name, sampling in named:
            if sampling.top_p < 1:
                bad.append(f"{name}.top_p = {sampling.top_p}")
            if sampling.top_k not in (-1, 0):
                bad.append(f"{name}.top_k = {sampling.top_k}")
        if bad:
            raise ValueError(
                f"{' and '.join(bad)} {'truncates' if len(bad) == 1 else 'truncate'} the sampling distribution: vLLM's logprobs are then renormalised over "
                "the kept tokens while the trainer scores the full vocabulary, so importance ratios are biased "
                "(measured on SmolLM2-135M: mean ratio 0.65 at top_p 0.5, 1.00 without). Train with top_p = 1 and "
                "top_k = -1 (lower the temperature to sharpen); truncation is fine in eval.sampling"
            )
        return self

    def group_size_of(self, source: SourceConfig) -> int:
        """The group size of `source`'s train groups: its own `group_size`, else `train.group_size`."""
        return source.group_size if source.group_size is not None else self.group_size

    @property
    def group_sizes(self) -> list[int]:
        """The group size of each train source, in `source` order."""
        return [self.group_size_of(s) for s in self.source]


class EvalConfig(BaseConfig):
    """Evaluation on the sources' eval splits."""

    interval: int | None = Field(None, gt=0, description="Eval every N steps (and on the base policy); None = never.")
    num_examples: int | None = Field(None, gt=0, description="Eval tasks per source; None = the whole eval split.")
    rollouts_per_example: int = Field(1, gt=0, description="Rollouts per eval task (avg@k and pass@k over them).")
    pass_threshold: float = Field(1.0, description="A rollout passes (pass@k) when its reward is at least this.")
    sampling: EvalSamplingConfig = Field(EvalSamplingConfig(temperature=1.0), description="Sampling of eval rollouts.")
    source: list[EvalSourceConfig] | None = Field(
        None,
        description="Eval sources, each with optional num_examples, rollouts_per_example and sampling (and, for the "
        "orchestrator's periodic eval, interval) of its own; default: the train sources' eval splits, with the "
        "values above.",
    )

    _unique_names = field_validator("source")(unique_source_names)
    _all_examples = field_validator("num_examples", mode="before")(refuse_all_examples_spelling)

    @model_validator(mode="after")
    def _no_repeated_greedy_rollouts(self) -> EvalConfig:
        """Temperature 0 with more than one rollout per task, globally or on a source (`repeated_greedy_problem`),
        naming the fields that give the pair: the source's own, else this section's (`[eval]`, which the error
        names as the command spells it). Runs before `_merge_source_sampling`, while a source's `sampling` holds only
        the fields set on it."""
        if self.source is None:
            problem = repeated_greedy_problem(self.sampling.temperature, self.rollouts_per_example)
            if problem is not None:
                raise ValueError(problem)
        for i, src in enumerate(self.source or []):
            own_temp = src.sampling is not None and "temperature" in src.sampling.model_fields_set
            own_k = src.rollouts_per_example is not None
            temp = src.sampling.temperature if own_temp else self.sampling.temperature
            per_task = src.rollouts_per_example if own_k else self.rollouts_per_example
            problem = repeated_greedy_problem(
                temp, per_task, temperature_field=f"eval.source.{i}.sampling.temperature" if own_temp else None,
                rollouts_field=f"eval.source.{i}.rollouts_per_example" if own_k else None)  # fmt: skip
            if problem is not None:
                inherited = [f for f, own in (("sampling.temperature", own_temp), ("rollouts_per_example", own_k))
                             if not own]  # fmt: skip
                whose = (f" (the source sets no {' or '.join(inherited)} of its own: [eval]'s applies)"
                         if inherited else "")  # fmt: skip
                raise ValueError(f"eval source {i} ({src.name!r}): {problem}{whose}")
        return self

    @model_validator(mode="after")
    def _merge_source_sampling(self) -> EvalConfig:
        """A source's `sampling` holds the fields set on it over `eval.sampling` (resolved here, so the config `rl`
        writes for the orchestrator carries the merged values)."""
        for src in self.source or []:
            if src.sampling is not None:
                own = src.sampling.model_dump(exclude_unset=True)
                src.sampling = EvalSamplingConfig(**(self.sampling.model_dump() | own))
        return self

    def settings_of(self, source: EvalSourceConfig | None) -> EvalSourceSettings:
        """The eval settings of `source` (None: a train source evaluated on its eval split): its own values, else
        this section's."""
        def own(field: str) -> Any:
            value = getattr(source, field) if source is not None else None
            return getattr(self, field) if value is None else value

        return EvalSourceSettings(
            interval=own("interval"), num_examples=own("num_examples"),
            rollouts_per_example=own("rollouts_per_example"), sampling=own("sampling"),
        )  # fmt: skip

    @field_validator("source", mode="before")
    @classmethod
    def _train_only_keys(cls, value: Any) -> Any:
        """A train-only setting (`TRAIN_ONLY`) on an eval source: refused with why and the fix, rather than as an
        unknown key."""
        for i, src in enumerate(value if isinstance(value, list) else []):
            key = next((k for k in TRAIN_ONLY if isinstance(src, dict) and src.get(k) is not None), None)
            if key is not None:
                given = src[key]  # a flag's value is still a string here: "2" is shown as 2
                numeric = isinstance(given, str) and given.replace(".", "", 1).isdigit()
                shown = given if numeric else json.dumps(given) if isinstance(given, str | int | float) else "{...}"
                raise ValueError(f"`source.{i}.{key} = {shown}` is a train-source setting: {TRAIN_ONLY[key]}")
        return value

    @property
    def scheduled(self) -> bool:
        """Whether the orchestrator evaluates at all: `interval` set here or on an eval source."""
        return self.interval is not None or any(s.interval is not None for s in self.source or [])

    def interval_problem(self, where: str, when: str = "at eval.interval") -> str | None:
        """None unless an eval source sets its own `interval` where only `eval.interval` is used (`where`: the
        command, `when`: when it evaluates); else the refusal naming the field."""
        for i, src in enumerate(self.source or []):
            if src.interval is not None:
                return (f"eval.source.{i}.interval is set: {where} evaluates every source {when}; remove it "
                        "(a per-source interval applies to the orchestrator's [[orchestrator.eval.source]])")
        return None


@dataclass(frozen=True)
class EvalSourceSettings:
    """One eval source's resolved settings (`EvalConfig.settings_of`)."""

    interval: int | None
    num_examples: int | None
    rollouts_per_example: int
    sampling: EvalSamplingConfig


def repeated_greedy_problem(temperature: float, rollouts_per_example: int, prefix: str = "eval.", *,
                            temperature_field: str | None = None, rollouts_field: str | None = None) -> str | None:
    """None unless `temperature = 0` (greedy decoding) meets `rollouts_per_example > 1`: every rollout of a task
    would be the same one, and avg@k / pass@k / pass@1 would count it k times as if independent. Else the refusal,
    naming both fields (`temperature_field`, `rollouts_field`; unset: `sampling.temperature` and
    `rollouts_per_example` under `prefix`) and the fixes."""
    if temperature != 0 or rollouts_per_example <= 1:
        return None
    at_k = rollouts_per_example
    temp = temperature_field or f"{prefix}sampling.temperature"
    rollouts = rollouts_field or f"{prefix}rollouts_per_example"
    seed = temp.removesuffix("temperature") + "seed"
    return (
        f"{temp} = 0 with {rollouts} = {at_k}: greedy decoding samples the same rollout {at_k} times per task, and "
        f"avg@{at_k}, pass@{at_k} and pass@1 would count it as {at_k} independent ones; set {rollouts} = 1, or "
        f"{temp} > 0 "
        f"(with {seed} set, each rollout gets its own reproducible seed)"
    )


class RendererConfig(BaseConfig):
    """Chat messages to tokens (and back) in the model's own format."""

    name: str = Field(
        "auto",
        description="Chat renderer: auto (the model family's `renderers` renderer, else one driven by the model's chat "
        "template), template, or a `renderers` name (qwen3, ...).",
    )
    enable_thinking: bool | None = Field(
        None,
        description="Render with the template's thinking mode on (the model may reason before answering); None = off, "
        "and (unlike an explicit false) never refused where the renderer and template have no thinking switch.",
    )


class OrchestratorConfig(BaseConfig):
    """`orchestrator @ config`: plays rollouts, scores groups, packs batches for the trainer."""

    model: ModelConfig = Field(ModelConfig(), description="The policy model inference serves.")
    backend: OrchestratorBackendConfig = Field(
        ServerClientBackendConfig(),
        description="Inference backend, chosen by `type`: server = the inference server(s) at client.base_url "
        "([orchestrator.client] holds its settings); custom = backend.import_path (a name registered in BACKENDS or "
        "`package.module:Class`, its settings in backend.kwargs). It must load new policy versions (transformers "
        "cannot: eval only). `backend = \"NAME\"` and `--backend NAME` are short for the type, or for a custom "
        "backend's import_path.",
    )
    client: ClientConfig = Field(ClientConfig(), description="Inference server(s) (backend.type = server).")
    renderer: RendererConfig = Field(RendererConfig(), description="Chat format.")
    concurrency: ConcurrencyConfig = Field(ConcurrencyConfig(), description="Rollouts in flight.")
    workers: WorkersConfig = Field(WorkersConfig(), description="Rollout worker processes.")
    train: TrainSamplingConfig = Field(TrainSamplingConfig(), description="Training rollouts.")
    eval: EvalConfig = Field(EvalConfig(), description="Periodic evaluation.")
    advantage: AdvantageConfig = Field(
        GRPOAdvantageConfig(), description="The advantage estimator, chosen by `type` (grpo, rloo, maxrl, custom)."
    )
    gate: GateConfig = Field(GateConfig(), description="Reject groups without signal; resample.")
    curriculum: CurriculumConfig = Field(CurriculumConfig(), description="Which train tasks are drawn more often.")
    teacher: TeacherConfig | None = Field(
        None, description="On-policy distillation: the teacher server that scores every train sample; None = off."
    )
    token_batch_size: int | None = Field(
        None,
        gt=0,
        description="Cut a step at this many prompt+completion tokens (at most batch_size rollouts); None = off.",
    )
    ckpt: CheckpointConfig = Field(CheckpointConfig(), description="Checkpoints for resume.")
    wandb: WandbConfig | None = Field(None, description="Weights & Biases logging; None = off.")
    log: LogConfig = Field(LogConfig(), description="Logging.")

    output_dir: Path = Field(Path("outputs/run"), description="The run directory.")
    batch_size: int = Field(
        32, gt=0,
        description="Rollouts per step: a multiple of the group size when the train sources share one; with several "
        "sizes at least the largest, and a step takes whole groups until it holds this many.",
    )
    max_steps: int | None = Field(None, gt=0, description="Stop after this many steps; None = run until stopped.")
    seq_len: int = Field(2048, gt=0, description="Max tokens per rollout sample and per packed micro-batch.")
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean"] = Field(
        "token-mean",
        description="How the policy-gradient loss weighs tokens: token-mean = every loss token of the step alike "
        "(DAPO); seq-mean-token-mean = each rollout's token mean, averaged over rollouts (GRPO as published); applied "
        "by scaling each rollout's advantage (prime_rl.orchestrator.packing.pack_items).",
    )
    max_async_level: int = Field(1, ge=0, description="Steps the orchestrator may run ahead of the trainer.")
    max_off_policy_steps: int = Field(8, ge=0, description="Drop rollouts (and their group) older than this.")
    num_train_ranks: int = Field(1, gt=0, description="Trainer data-parallel ranks (one rank_R.bin each).")
    rollout_transport: RolloutTransportConfig = Field(
        RolloutTransportConfig(), description="How each step's batches reach the trainer ranks (files or TCP)."
    )
    weight_transport: WeightTransportConfig = Field(
        WeightTransportConfig(), description="How policy versions reach the inference servers (files or a collective "
        "broadcast from the trainer)."
    )
    traces_per_step: int = Field(4, ge=0, description="Readable rollouts written to traces.jsonl per step.")
    archive: ArchiveConfig = Field(ArchiveConfig(), description="Every train and eval rollout, readable (archive/).")
    metrics_server: MetricsServerConfig | None = Field(
        None, description="Prometheus /metrics endpoint for operators (loopback by default); None = off."
    )
    weights_timeout_s: float = Field(1800.0, gt=0, description="How long to wait for a policy version.")
    max_empty_steps: int | None = Field(
        5, gt=0,
        description="Stop the run with an error after this many consecutive steps with nothing to train (no loss "
        "token: every rollout masked, never sampled or filtered; or no rollout with a nonzero advantage: equal rewards "
        "in every group); None = never stop.",
    )
    max_consecutive_errors: int | None = Field(None, gt=0, description="Stop after N masked rollouts in a row.")
    max_error_rate: float | None = Field(None, gt=0, le=1, description="Stop above this masked share.")
    error_rate_window: int = Field(64, gt=0, description="Rollouts in max_error_rate's window.")
    reward_range: tuple[float, float] = Field(
        (-1e6, 1e6),
        description="Rewards accepted from an environment (inclusive); a reward outside masks its rollout, named in "
        "the log (a reward of 1e308 would overflow the group's sums, one of 1e39 the trainer's float32).",
    )
    seed: int = Field(0, description="Seed of the task stream's order and of random.")
    dry_run: bool = Field(False, description="Write the resolved config and exit.")

    @field_validator("reward_range")
    @classmethod
    def _reward_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not (math.isfinite(low) and math.isfinite(high) and low < high and max(-low, high) <= 1e30):
            raise ValueError(
                f"reward_range = [{low:g}, {high:g}]: use finite bounds low < high within [-1e30, 1e30] (advantages "
                "and the trainer's float32 must hold the rewards' differences)"
            )
        return value

    @field_validator("backend", mode="before")
    @classmethod
    def _backend_name(cls, value: Any) -> Any:
        return backend_from_name(value)

    @field_validator("advantage", mode="before")
    @classmethod
    def _legacy_advantage(cls, value: Any) -> Any:
        return legacy_advantage_type(value)

    @model_validator(mode="after")
    def _merge_source_advantage(self) -> OrchestratorConfig:
        """A source's `advantage` holds the fields set on it over `[orchestrator.advantage]`'s (`merged_advantage`,
        resolved here as `sampling` is); global fields that act on no source are refused."""
        for src in self.train.source:
            if src.advantage is not None:
                src.advantage = merged_advantage(self.advantage, src.advantage)
        if (problem := unused_global_advantage_problem(self.advantage, self.train.source)) is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _batch_multiple_of_group(self) -> OrchestratorConfig:
        problem = batch_size_problem(self.batch_size, self.train)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _eval_scheduled(self) -> OrchestratorConfig:
        if (problem := unscheduled_eval_problem(self.eval)) is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _recipes_take_effect(self) -> OrchestratorConfig:
        if (problem := recipe_problem(self)) is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _groups_with_signal(self) -> OrchestratorConfig:
        """Groups of one rollout train only with a teacher or a reference-KL term (`lone_group_problem`); under
        `rl` the whole config decides (`config.rl.RLConfig`)."""
        if SIGNAL_DECIDED_BY_RL.get():
            return self
        problem = lone_group_problem(self, self.teacher is not None or self.gate.keep_for_kl, fix=(
            "a teacher ([teacher] name and base_url; the trainer's loss.type = \"opd\"), or the trainer's "
            "reference-KL term (its loss.ref_kl_coef > 0) with gate.keep_for_kl = true"))  # fmt: skip
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _client_of_the_server_backend(self) -> OrchestratorConfig:
        problem = client_problem(self.backend, self.client)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _collective_needs_servers(self) -> OrchestratorConfig:
        if self.weight_transport.type == "collective" and self.backend.type != "server":
            raise ValueError(f"weight_transport.type = 'collective' needs backend.type = 'server' (inference servers "
                             f"whose workers join the weight group), not {self.backend.import_path!r}")  # fmt: skip
        return self


def batch_size_problem(batch_size: int, train: TrainSamplingConfig, prefix: str = "") -> str | None:
    """None when `batch_size` fits the train sources' group sizes, else the refusal (fields named under `prefix`).

    One group size (every source's own size unset or equal): `batch_size` must be a multiple of it, and each step
    holds exactly `batch_size` rollouts. Several sizes: a step takes whole finished groups until they hold at least
    `batch_size` rollouts, so `batch_size` must be at least the largest size (a step then holds fewer than
    `batch_size` + that size rollouts); no multiple is required, since a mix drawn by ratio cannot be held to one.
    """
    sizes = train.group_sizes
    if len(set(sizes)) <= 1:
        group_size = sizes[0] if sizes else train.group_size
        if batch_size % group_size == 0:
            return None
        field = "train.group_size"
        for i, src in enumerate(train.source):
            if src.group_size is not None:
                field = f"train.source.{i}.group_size"
        return (f"{prefix}batch_size ({batch_size}) must be a multiple of {prefix}{field} ({group_size}): every "
                f"group of this size trains whole; e.g. {prefix}batch_size = "
                f"{group_size * max(1, batch_size // group_size)}")
    largest = max(range(len(sizes)), key=sizes.__getitem__)
    if batch_size >= sizes[largest]:
        return None
    field = f"train.source.{largest}.group_size" if train.source[largest].group_size is not None else "train.group_size"
    return (f"{prefix}batch_size ({batch_size}) is below {prefix}{field} ({sizes[largest]}, source "
            f"{train.source[largest].name!r}): a step holds whole groups; raise {prefix}batch_size to at least "
            f"{sizes[largest]} or lower that group size")


class EvalCommandConfig(BaseConfig):
    """`evals @ config`: evaluate a model on environments' eval splits, with a results table."""

    NOT_FLAGS: ClassVar[tuple[str, ...]] = ("eval.interval", "eval.source.N.interval")
    """Fields of the shared `[eval]` that `evals` refuses (it scores once per model, or per checkpoint with
    `[checkpoints]`): its `--help` and docs/config.md leave them out (`config.help.panels`)."""

    model: ModelConfig = Field(ModelConfig(), description="The evaluated model (its name must match the server's).")
    backend: BackendConfig = Field(
        ServerBackendConfig(),
        description="Where the model is sampled, chosen by `type`: server = the inference server(s) at "
        "backend.base_url serve model.name; transformers = load model.name in this process and sample with "
        "transformers generate (no server; slower per token); custom = backend.import_path. `--backend NAME` sets "
        "the type; `backend = \"NAME\"` with [client] (server) or [local] (transformers) is read as [backend].",
    )
    renderer: RendererConfig = Field(RendererConfig(), description="Chat format.")
    concurrency: ConcurrencyConfig = Field(ConcurrencyConfig(), description="Rollouts in flight.")
    eval: EvalConfig = Field(EvalConfig(source=[EvalSourceConfig()]), description="What to evaluate and how.")
    checkpoints: EvalCheckpointsConfig = Field(
        EvalCheckpointsConfig(), description="A run's checkpoints to evaluate (sweep or watch) instead of one model."
    )
    log: LogConfig = Field(LogConfig(), description="Logging.")
    output_dir: Path = Field(Path("outputs/eval"), description="Where results, the table and logs go.")
    seq_len: int = Field(2048, gt=0, description="Max tokens per rollout.")
    seed: int = Field(0, description="Seed of task order and (backend.type = transformers) of sampling.")
    dry_run: bool = Field(False, description="Write the resolved config and exit.")

    @model_validator(mode="before")
    @classmethod
    def _flat_backend(cls, data: Any) -> Any:
        return backend_from_flat(data)

    @field_validator("eval")
    @classmethod
    def _no_interval(cls, value: EvalConfig) -> EvalConfig:
        once = "once per model (per checkpoint with [checkpoints])"
        if value.interval is not None:
            raise ValueError(f"eval.interval = {value.interval} is set, but evals scores {once}, so it would do "
                             "nothing; remove it ([checkpoints] every = N picks a run's checkpoints to score)")
        problem = value.interval_problem("evals", once)
        if problem is not None:
            raise ValueError(problem)
        return value


for _model in (SourceConfig, EvalSourceConfig, TrainSamplingConfig, EvalConfig, OrchestratorConfig, EvalCommandConfig):
    _model.model_rebuild()  # SourceConfig.advantage names AdvantageConfig, defined after it
