"""Configuration of the inference server (`inference`): vLLM with the prime-rl worker extension."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from prime_rl.config.base import BaseConfig, LogConfig, ModelConfig


class ServerConfig(BaseConfig):
    host: str = Field("127.0.0.1", description="Bind address (loopback unless told otherwise).")
    port: int = Field(8000, gt=0, lt=65536)
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for /health after start.")
    log_file: Path | None = Field(None, description="vLLM's own output; default: <output_dir>/logs/vllm.log.")


class VllmConfig(BaseConfig):
    """Options passed through to vLLM's OpenAI-compatible server (`--kebab-case` flags)."""

    tool_call_parser: str | None = Field("hermes", description="vLLM --tool-call-parser; None disables tool parsing.")
    reasoning_parser: str | None = None
    max_model_len: int | None = Field(None, gt=0)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    enforce_eager: bool | None = Field(None, description="None = True on CPU, False on GPU.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    tensor_parallel_size: int = Field(1, gt=0)
    data_parallel_size: int = Field(1, gt=0)
    enable_lora: bool = False
    max_lora_rank: int = Field(64, gt=0)
    max_num_seqs: int | None = Field(None, gt=0)
    enable_prefix_caching: bool | None = None
    kv_cache_space_gb: float = Field(1.0, gt=0, description="CPU only: VLLM_CPU_KVCACHE_SPACE in GiB.")
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = Field(
        "processed_logprobs", description="processed = log_softmax(logits / T) as sampled; the trainer matches it."
    )
    seed: int = 0
    weight_update_pause_mode: Literal["wait", "keep", "abort"] = Field(
        "wait",
        description="/update_weights: wait = in-flight requests finish on the old weights; keep = frozen, then "
        "continue on the new ones; abort = ended with finish_reason 'abort'.",
    )
    extra_args: dict[str, Any] = Field(default_factory=dict, description="Any other vLLM flag: {flag: value}.")


class InferenceConfig(BaseConfig):
    """`inference @ config`: serves `model.name` with vLLM for sampling and live weight updates."""

    model: ModelConfig = ModelConfig()
    server: ServerConfig = ServerConfig()
    vllm: VllmConfig = VllmConfig()
    log: LogConfig = LogConfig()
    output_dir: Path = Field(Path("outputs/run"), description="The run directory (logs go to its logs/).")
    dry_run: bool = False
