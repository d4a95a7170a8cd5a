"""How a command reaches the inference server(s): `[client]` of the orchestrator, `[backend]` of `evals` with
`type = "server"`."""

from __future__ import annotations

from pydantic import Field

from prime_rl.config.base import BaseConfig


class ClientConfig(BaseConfig):
    """How the orchestrator reaches the inference server(s)."""

    base_url: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000"],
        description="One URL per inference server (a rollout goes to the least-loaded healthy one, then stays).",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="Read timeout of one generate request.")
    connect_timeout_s: float = Field(10.0, gt=0, description="TCP connect timeout of one request.")
    max_retries: int = Field(5, ge=0, description="Retries on 5xx and transport errors (exponential backoff).")
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for the servers' /health at start.")
    api_key: str | None = Field(None, description="Sent as `Authorization: Bearer KEY` (servers started with one).")
    parallel_sampling: bool = Field(
        False,
        description="Send the generate calls that ask for the same prompt with the same settings at once (a group's "
        "first turn) as one request with n samples (vLLM parallel sampling: the prompt is prefilled once, fewer "
        "requests). Seeds are per request (choice i: seed + i), so seeded runs sample differently than with false. "
        "backend = server only.",
    )
