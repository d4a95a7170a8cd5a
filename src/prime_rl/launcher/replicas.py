"""Inference replicas: independent `inference` servers of one run, each with its own config file, port, log and
(on GPU) slice of the inference GPUs. The orchestrator gets one URL per replica (`orchestrator.client.base_url`)
and spreads requests over the healthy ones.

Single-node: replica j listens on `inference.server.port + j` at `inference.server.host`. Multi-node: see
`multinode.py` (ports from `deployment.port_base`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from prime_rl.config.inference import InferenceConfig
from prime_rl.config.rl import RLConfig
from prime_rl.monitor.rundir import RunDir
from prime_rl.process import ChildSpec


@dataclass(frozen=True)
class Replica:
    """Replica `index` (global over the run): where it binds, where others reach it, and its file names."""

    index: int
    bind_host: str
    addr: str
    port: int

    @property
    def name(self) -> str:
        return "inference" if self.index == 0 else f"inference-{self.index}"

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}"

    @property
    def health_url(self) -> str:
        return self.url + "/health"


def reach_addr(host: str) -> str:
    """The address to connect to a server bound at `host` on this machine (wildcards and names -> loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "localhost", "::") else host


def local_replicas(cfg: RLConfig) -> list[Replica]:
    """The replicas of a single-node run: `infer_replicas_per_node` servers on consecutive ports."""
    s = cfg.inference.server
    return [Replica(j, s.host, reach_addr(s.host), s.port + j) for j in range(cfg.deployment.infer_replicas_per_node)]


def replica_config(cfg: RLConfig, run: RunDir, rep: Replica, multi: bool) -> InferenceConfig:
    """`cfg.inference` for replica `rep` (host, port; vLLM's own log `logs/vllm-<i>.log` beside replica 0's)."""
    c = cfg.inference.model_copy(deep=True)
    c.server.host = rep.bind_host
    c.server.port = rep.port
    if rep.index > 0 or multi:
        c.server.log_file = run.logs / f"vllm-{rep.index}.log"
    c.output_dir = run.root
    return c


def config_path(run: RunDir, rep: Replica) -> Path:
    return run.configs / f"{rep.name}.toml"


def write_replica_configs(cfg: RLConfig, run: RunDir, reps: list[Replica], multi: bool = False) -> None:
    """Write `configs/inference[-i].toml` for every replica (replica 0's is the plain `inference.toml`)."""
    from prime_rl.config.loader import write_config

    for rep in reps:
        write_config(replica_config(cfg, run, rep, multi), config_path(run, rep))


def replica_spec(run: RunDir, rep: Replica, env: dict[str, str], log_suffix: str = "") -> ChildSpec:
    argv = [sys.executable, "-m", "prime_rl.cli.inference", "@", str(config_path(run, rep))]
    return ChildSpec(rep.name, argv, run.log_file(f"{rep.name}{log_suffix}.console"), env)
