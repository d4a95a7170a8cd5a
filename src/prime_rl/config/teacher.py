"""Configuration of on-policy distillation's teacher: the frozen model whose logprobs score the student's rollouts
(`[orchestrator.teacher]`), and the teacher inference server `rl` starts (`[teacher]`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from prime_rl.config.base import BaseConfig, ModelConfig
from prime_rl.config.inference import InferenceConfig, ServerConfig, VllmConfig

if TYPE_CHECKING:
    from prime_rl.config.client import ClientConfig


class TeacherConfig(BaseConfig):
    """`[orchestrator.teacher]`: the teacher inference server(s). After a group is sampled, every sample (prompt
    and completion tokens) is sent to the teacher's `/v1/completions` with `prompt_logprobs`, and the teacher's
    logprob of each sampled token goes to the trainer with the batch (the reference prime-rl's
    `[orchestrator.algo.teacher]`, `name` + `base_url`). The teacher's tokenizer must equal the student's (checked
    at start). Train on it with `[trainer.loss] type = "opd"` or `teacher_kl_coef`."""

    name: str = Field(description="The model the teacher server serves (its `model.name`), sent with each request.")
    base_url: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8001"],
        description="One URL per teacher server (requests spread over them); `rl` with [teacher] sets it.",
    )
    api_key: str | None = Field(None, description="Sent as `Authorization: Bearer KEY` (servers started with one).")
    request_timeout_s: float = Field(600.0, gt=0, description="Read timeout of one scoring request.")
    max_retries: int = Field(5, ge=0, description="Retries on 5xx and transport errors (exponential backoff).")
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for the servers' /health at start.")

    def client(self) -> ClientConfig:
        """The inference client settings of the teacher servers (`prime_rl.inference.routing.Router`)."""
        from prime_rl.config.client import ClientConfig

        return ClientConfig(base_url=self.base_url, api_key=self.api_key, request_timeout_s=self.request_timeout_s,
                            max_retries=self.max_retries, health_timeout_s=self.health_timeout_s)  # fmt: skip


NOT_INHERITED = ("tensor_parallel_size", "data_parallel_size", "enable_lora", "max_lora_rank",
                 "weight_update_pause_mode", "extra_args", "allow_distribution_changes")
"""The `[inference.vllm]` fields `[teacher.vllm]` does not inherit (`TeacherServerConfig.inherit_vllm`)."""


class TeacherServerConfig(BaseConfig):
    """`[teacher]` of `rl`: the teacher inference server `rl` starts next to the policy's (single-node runs), serving
    `model.name` frozen (no weight updates); `rl` points `[orchestrator.teacher]` at it. Its tokenizer must be the
    student's. On GPU it shares the first inference GPU: set both servers' `vllm.gpu_memory_utilization` so they
    fit together."""

    model: ModelConfig = Field(description="The teacher model (`[teacher.model] name = ...`).")
    server: ServerConfig = Field(ServerConfig(port=8001), description="Address of the teacher server (port 8001).")
    vllm: VllmConfig = Field(
        VllmConfig(),
        description="vLLM engine options of the teacher server; a field not set here is [inference.vllm]'s, except "
        "the parallel sizes, LoRA, weight_update_pause_mode, extra_args and allow_distribution_changes. The parallel "
        "sizes must be 1 (one device); max_model_len must hold seq_len + 1 tokens.",
    )

    def inherit_vllm(self, policy: VllmConfig) -> set[str]:
        """Fill the `vllm` fields not set under `[teacher.vllm]` from `policy` (`[inference.vllm]`), but for
        `NOT_INHERITED`: the parallel sizes (the teacher runs on one device beside replica 0), LoRA serving and the
        weight-update pause (the teacher is frozen), and `extra_args` / `allow_distribution_changes` (server flags
        such as the policy server's `--api-key`, which the orchestrator does not send to the teacher). Returns the
        names of the fields taken from `policy`."""
        own = self.vllm.model_dump(exclude_unset=True)
        taken = policy.model_dump(exclude=set(NOT_INHERITED) | set(own))
        self.vllm = VllmConfig(**(taken | own))
        return set(taken)

    def inference_config(self, output_dir: Path) -> InferenceConfig:
        """The `inference` config of the teacher server: its vLLM log `<output_dir>/logs/vllm-teacher.log` unless
        `server.log_file` is set."""
        server = self.server
        if server.log_file is None:
            server = server.model_copy(update={"log_file": Path(output_dir) / "logs" / "vllm-teacher.log"})
        return InferenceConfig(model=self.model, server=server, vllm=self.vllm, output_dir=output_dir)

    @property
    def url(self) -> str:
        """The teacher server's base URL as the orchestrator reaches it."""
        host = "127.0.0.1" if self.server.host in ("0.0.0.0", "::") else self.server.host
        return f"http://{host}:{self.server.port}"
