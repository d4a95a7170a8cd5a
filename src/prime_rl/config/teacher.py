"""Configuration of on-policy distillation's teacher: the frozen model whose logprobs score the student's rollouts
(`[orchestrator.teacher]`), and the teacher inference server `rl` starts (`[teacher]`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from prime_rl.config.base import BaseConfig

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import ClientConfig


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
        from prime_rl.config.orchestrator import ClientConfig

        return ClientConfig(base_url=self.base_url, api_key=self.api_key, request_timeout_s=self.request_timeout_s,
                            max_retries=self.max_retries, health_timeout_s=self.health_timeout_s)  # fmt: skip
