"""Operator metrics: an optional Prometheus endpoint (`metrics_server`) on the orchestrator and the trainer.

Served by `prometheus_client.start_http_server` on its own registry, in a daemon thread of the process; updated
once per step from the step's metrics (the same numbers as `metrics.jsonl`). Every series carries the label
`process` (`orchestrator` or `trainer`). Series:

    prime_rl_step                         last finished step
    prime_rl_policy_version               orchestrator: the policy version inference serves; trainer: the last published
    prime_rl_last_step_timestamp_seconds  Unix time of the last step (a heartbeat: alert when it stops moving)
    prime_rl_step_time_seconds            the last step's wall time
    prime_rl_rollouts_total               counter (orchestrator); rate() gives rollouts/s
    prime_rl_rollouts_per_second          the last step's rollouts / step time
    prime_rl_tokens_total                 counter: orchestrator sampled tokens, trainer trained tokens
    prime_rl_tokens_per_second            the last step's tokens / step time
    prime_rl_rollout_errors_total{kind}   masked rollouts by error kind (orchestrator)
    prime_rl_off_policy_steps             the last step's largest off-policy lag (orchestrator)
    prime_rl_mismatch_kl                  k3 estimate of KL(inference || trainer), last step (trainer, dppo_kl loss)
    prime_rl_queue_size{queue}            orchestrator: rollouts running, groups ready but not cut
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from prime_rl.config.metrics_server import MetricsServerConfig
from prime_rl.monitor.logger import get_logger

log = get_logger("monitor.prometheus")


def is_loopback(host: str) -> bool:
    """Whether `host` binds loopback only (`localhost`, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OperatorMetrics:
    """The series of the module docstring on a private registry, served at `http://host:port/metrics` once
    `start` ran (`port` 0 picks a free port: read `.port` after `start`).

    Raises (start): MissingExtraError without prometheus-client; OSError when the port is taken.
    """

    def __init__(self, process: str, cfg: MetricsServerConfig):
        from prime_rl.extras import require

        require("prometheus_client", "metrics", "orchestrator/trainer.metrics_server")
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.process, self.cfg = process, cfg
        self.registry = CollectorRegistry()
        reg, labels = self.registry, ["process"]
        self.step = Gauge("prime_rl_step", "Last finished step.", labels, registry=reg)
        self.version = Gauge("prime_rl_policy_version", "Policy version served (orchestrator) or last published "
                             "(trainer).", labels, registry=reg)  # fmt: skip
        self.heartbeat = Gauge("prime_rl_last_step_timestamp_seconds", "Unix time of the last step.",
                               labels, registry=reg)
        self.step_time = Gauge("prime_rl_step_time_seconds", "Wall time of the last step.", labels, registry=reg)
        self.rollouts = Counter("prime_rl_rollouts", "Rollouts in finished steps.", labels, registry=reg)
        self.rollouts_rate = Gauge("prime_rl_rollouts_per_second", "Last step's rollouts per second.",
                                   labels, registry=reg)
        self.tokens = Counter("prime_rl_tokens", "Tokens sampled (orchestrator) or trained (trainer).",
                              labels, registry=reg)
        self.tokens_rate = Gauge("prime_rl_tokens_per_second", "Last step's tokens per second.", labels, registry=reg)
        self.errors = Counter("prime_rl_rollout_errors", "Masked rollouts by error kind.",
                              [*labels, "kind"], registry=reg)
        self.off_policy = Gauge("prime_rl_off_policy_steps", "Last step's largest off-policy lag.",
                                labels, registry=reg)
        self.mismatch_kl = Gauge("prime_rl_mismatch_kl", "k3 estimate of KL(inference||trainer).", labels, registry=reg)
        self.queue = Gauge("prime_rl_queue_size", "Orchestrator queues: running rollouts, ready groups.",
                           [*labels, "queue"], registry=reg)  # fmt: skip
        self._server: Any = None
        self.port: int | None = None

    def start(self) -> OperatorMetrics:
        """Serve `/metrics` (a daemon thread); warns when `host` is not loopback."""
        from prometheus_client import start_http_server

        if not is_loopback(self.cfg.host):
            log.warning("metrics_server.host = %r is not loopback: run metrics are open to the network; bind "
                        "127.0.0.1 and scrape through a tunnel or sidecar unless the network is private",
                        self.cfg.host)  # fmt: skip
        self._server, _ = start_http_server(self.cfg.port, addr=self.cfg.host, registry=self.registry)
        self.port = self._server.server_port
        log.info("%s metrics endpoint: http://%s:%d/metrics", self.process, self.cfg.host, self.port)
        return self

    def _common(self, step: int, metrics: dict[str, Any], version: int) -> None:
        proc = self.process
        self.step.labels(proc).set(step)
        self.version.labels(proc).set(version)
        self.heartbeat.labels(proc).set(time.time())
        if (dt := metrics.get("step_time_s")) is not None:
            self.step_time.labels(proc).set(dt)

    def orchestrator_step(self, step: int, metrics: dict[str, Any], *, running: int, ready: int) -> None:
        """Record an orchestrator step from its metrics row (`stats.step_metrics`) and the scheduler's queues."""
        proc = self.process
        self._common(step, metrics, int(metrics.get("policy_version", 0)))
        rollouts = float(metrics.get("num_rollouts", 0))
        tokens = rollouts * float(metrics.get("seq_len_mean", 0.0))
        self.rollouts.labels(proc).inc(rollouts)
        self.tokens.labels(proc).inc(tokens)
        dt = float(metrics.get("step_time_s") or 0.0)
        self.rollouts_rate.labels(proc).set(rollouts / dt if dt > 0 else 0.0)
        self.tokens_rate.labels(proc).set(tokens / dt if dt > 0 else 0.0)
        for key, count in metrics.items():
            if key.startswith("errors/"):
                self.errors.labels(proc, key.removeprefix("errors/")).inc(count)
        self.off_policy.labels(proc).set(metrics.get("max_off_policy", 0))
        self.queue.labels(proc, "running_rollouts").set(running)
        self.queue.labels(proc, "ready_groups").set(ready)

    def trainer_step(self, step: int, metrics: dict[str, Any]) -> None:
        """Record a trainer step from its metrics row (`Engine._step_metrics` plus the loss's); publishes version
        `step`."""
        proc = self.process
        self._common(step, metrics, step)
        self.tokens.labels(proc).inc(float(metrics.get("tokens", 0.0)))
        self.tokens_rate.labels(proc).set(float(metrics.get("tokens_per_s", 0.0)))
        if (kl := metrics.get("mismatch_kl")) is not None:
            self.mismatch_kl.labels(proc).set(kl)

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def start_metrics_server(process: str, cfg: MetricsServerConfig | None) -> OperatorMetrics | None:
    """The started endpoint, or None when `cfg` is None (off, the default)."""
    return None if cfg is None else OperatorMetrics(process, cfg).start()
