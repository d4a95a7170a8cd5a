"""Configuration of the orchestrator's concurrency: rollouts at once and rollout worker processes."""

from __future__ import annotations

from pydantic import Field

from prime_rl.config.base import BaseConfig


class ConcurrencyConfig(BaseConfig):
    """How many rollouts run at once."""

    max_inflight: int = Field(32, gt=0, description="Rollouts running at once.")


class WorkersConfig(BaseConfig):
    """Rollout worker processes (prime_rl.orchestrator.workers)."""

    count: int = Field(
        0, ge=0, description="Processes that play train rollouts (agent loop, env calls, sampling); 0 = in-process."
    )
    start_timeout_s: float = Field(300.0, gt=0, description="How long a worker may take to start.")
