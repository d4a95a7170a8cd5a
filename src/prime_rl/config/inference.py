"""Configuration of the inference server (`inference`): vLLM with the prime-rl worker extension."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig, LogConfig, ModelConfig

# vLLM options that change the distribution a request is sampled (or scored) from, by normalised name (see
# `flag_name`), with the reason each is refused. The client sends temperature, top_p, top_k, min_p and the three
# penalties with every request (neutral where training needs it), so none of them belongs on the server.
DISTRIBUTION_FLAGS: dict[str, str] = {
    "logits-processors": "server-wide logits processors change every request's distribution",
    "override-generation-config": "it sets server-wide sampling defaults (top_p, top_k, min_p, penalties, ...)",
    "generation-config": "prime-rl passes --generation-config vllm so no generation_config.json sets sampling defaults",
    "logprobs-mode": "set it with vllm.logprobs_mode (training needs processed_logprobs)",
    **dict.fromkeys(
        ("temperature", "top-p", "top-k", "min-p", "repetition-penalty", "presence-penalty", "frequency-penalty"),
        "a sampling option is set per request (orchestrator.train.sampling / eval.sampling), not on the server",
    ),
}


# True while an `rl` config validates its sections (`config.rl.RLConfig`): the server samples training rollouts, so
# `VllmConfig` refuses a distribution-changing option with rl's fix (remove it), not the eval-only escape hatch.
SAMPLES_FOR_TRAINING: ContextVar[bool] = ContextVar("prime_rl_samples_for_training", default=False)


def flag_name(token: str) -> str:
    """The normalised name of a vLLM option as written in `extra_args` or on a command line: leading dashes and an
    `=value` tail dropped, underscores as dashes, lower case (`--Logits_Processors=x` -> `logits-processors`;
    vLLM's argument parser reads underscores and dashes alike)."""
    return token.lstrip("-").split("=", 1)[0].replace("_", "-").lower()


def distribution_flags(extra_args: dict[str, Any]) -> list[tuple[str, str]]:
    """The `(key as written, reason)` pairs of `extra_args` that change the sampled distribution
    (`DISTRIBUTION_FLAGS`): each key, and each string value (or list item) starting with `-`, since values go to
    vLLM's command line too (`{"max-num-seqs": ["4", "--logits_processors", "m:P"]}`)."""
    found = []
    for key, val in extra_args.items():
        tokens = [key] + [v for v in (val if isinstance(val, list | tuple) else [val]) if isinstance(v, str)]
        for tok in tokens:
            if (tok is key or tok.startswith("-")) and flag_name(tok) in DISTRIBUTION_FLAGS:
                found.append((tok, DISTRIBUTION_FLAGS[flag_name(tok)]))
    return found


class ServerConfig(BaseConfig):
    """Where the OpenAI-compatible server listens."""

    host: str = Field("127.0.0.1", description="Bind address (loopback unless told otherwise).")
    port: int = Field(8000, gt=0, lt=65536, description="TCP port; refused at once if taken.")
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for /health after start.")
    log_file: Path | None = Field(None, description="vLLM's own output; default: <output_dir>/logs/vllm.log.")
    token: str | None = Field(
        None,
        description="Bearer token the admin routes (/update_weights, /policy_version, vLLM's dev routes) require; "
        "also read from PRIME_RL_INFERENCE_TOKEN. Without it (and without vLLM's --api-key) they are closed "
        "when host is not loopback.",
    )
    weights_dir: Path | None = Field(
        None, description="Folder whose subfolders /update_weights may load; default: <output_dir>/weights."
    )
    any_weights_path: bool = Field(False, description="Let /update_weights load from any folder on the host.")


class VllmConfig(BaseConfig):
    """Options passed through to vLLM's OpenAI-compatible server (`--kebab-case` flags)."""

    tool_call_parser: str | None = Field("hermes", description="vLLM --tool-call-parser; None disables tool parsing.")
    reasoning_parser: str | None = Field(None, description="vLLM --reasoning-parser (thinking models); None = off.")
    max_model_len: int | None = Field(None, gt=0, description="Context length; None = the model's own.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights and compute dtype; auto = model.dtype, whose auto is bfloat16 on GPU and on CPU where bf16 pays."
    )
    enforce_eager: bool | None = Field(None, description="None = True on CPU, False on GPU.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="GPU only: share of GPU memory vLLM may use.")
    tensor_parallel_size: int = Field(1, gt=0, description="GPUs one model copy is split over.")
    data_parallel_size: int = Field(1, gt=0, description="Model copies behind this one server.")
    enable_lora: bool = Field(False, description="Serve LoRA adapters (vLLM --enable-lora).")
    max_lora_rank: int = Field(64, gt=0, description="Largest LoRA rank served (with enable_lora).")
    max_num_seqs: int | None = Field(None, gt=0, description="Most sequences decoded at once; None = vLLM's default.")
    enable_prefix_caching: bool | None = Field(None, description="Reuse KV of shared prompt prefixes; None = vLLM's default.")
    kv_cache_space_gb: float = Field(1.0, gt=0, description="CPU only: VLLM_CPU_KVCACHE_SPACE in GiB.")
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = Field(
        "processed_logprobs", description="processed = log_softmax(logits / T) as sampled; the trainer matches it."
    )
    seed: int = Field(0, description="vLLM --seed (the sampler's base seed).")
    weight_update_pause_mode: Literal["wait", "keep", "abort"] = Field(
        "wait",
        description="/update_weights: wait = in-flight requests finish on the old weights; keep = frozen, then "
        "continue on the new ones; abort = ended with finish_reason 'abort'.",
    )
    extra_args: dict[str, Any] = Field(default_factory=dict, description="Any other vLLM flag: {flag: value}.")
    allow_distribution_changes: bool = Field(
        False,
        description="Let extra_args carry vLLM options that change the sampled distribution (logits processors, "
        "generation-config overrides, sampling defaults); only for a server that serves evals. `rl` refuses them "
        "regardless.",
    )

    @model_validator(mode="after")
    def _same_distribution(self) -> VllmConfig:
        bad = distribution_flags(self.extra_args)
        if bad and SAMPLES_FOR_TRAINING.get():
            key, why = bad[0]
            raise ValueError(
                f"extra_args {key!r} changes the sampled distribution ({why}), which the trainer's logprobs do not "
                "replay; rl trains on what this server samples, so it refuses the option whatever "
                "allow_distribution_changes says: remove it"
            )
        if bad and not self.allow_distribution_changes:
            key, why = bad[0]
            raise ValueError(
                f"vllm.extra_args: {key!r} changes the sampled distribution ({why}), which the trainer's logprobs do "
                "not replay; remove it, or set vllm.allow_distribution_changes = true for a server that only serves "
                "evals"
            )
        return self


class InferenceConfig(BaseConfig):
    """`inference @ config`: serves `model.name` with vLLM for sampling and live weight updates."""

    model: ModelConfig = Field(ModelConfig(), description="The served model.")
    server: ServerConfig = Field(ServerConfig(), description="Address and start-up wait.")
    vllm: VllmConfig = Field(VllmConfig(), description="vLLM engine options.")
    log: LogConfig = Field(LogConfig(), description="Logging.")
    output_dir: Path = Field(Path("outputs/run"), description="The run directory (logs go to its logs/).")
    dry_run: bool = Field(False, description="Write the resolved config and exit.")
