"""`[orchestrator.metrics_server]` / `[trainer.metrics_server]`: the optional Prometheus endpoint (off by default)."""

from __future__ import annotations

from pydantic import Field

from prime_rl.config.base import BaseConfig


class MetricsServerConfig(BaseConfig):
    """A Prometheus `/metrics` endpoint on the process (prime_rl.monitor.prometheus; needs `prometheus-client`, in
    the `metrics` extra). Loopback by default: a wider `host` exposes run metrics to the network (warned)."""

    host: str = Field("127.0.0.1", description="Address to bind; a non-loopback one is warned about.")
    port: int = Field(9464, ge=0, le=65535, description="TCP port of /metrics; 0 = any free port (logged).")
