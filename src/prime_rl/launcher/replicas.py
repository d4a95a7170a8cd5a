"""Inference replicas: independent `inference` servers of one run, each with its own config file, port, log and
(on GPU) slice of the inference GPUs. The orchestrator gets one URL per replica (`orchestrator.client.base_url`)
and spreads requests over the healthy ones. Where each replica binds and listens: `layout.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from prime_rl.config.inference import InferenceConfig
from prime_rl.config.rl import RLConfig
from prime_rl.launcher.layout import Replica
from prime_rl.monitor.rundir import RunDir
from prime_rl.process import ChildSpec


def replica_config(cfg: RLConfig, run: RunDir, rep: Replica, multi: bool) -> InferenceConfig:
    """A new `cfg.inference` for replica `rep` (host, port; vLLM's own log `logs/vllm-<i>.log` beside replica 0's
    in a single-node run, one per replica in a multi-node run). `cfg` is not changed."""
    server = {"host": rep.bind_host, "port": rep.port}
    if rep.index > 0 or multi:
        server["log_file"] = run.logs / f"vllm-{rep.index}.log"
    inf = cfg.inference
    return inf.model_copy(update={"server": inf.server.model_copy(update=server), "output_dir": run.root})


def config_path(run: RunDir, rep: Replica) -> Path:
    """`configs/inference.toml` for replica 0, `configs/inference-<i>.toml` for the others."""
    return run.configs / f"{rep.name}.toml"


def replica_spec(run: RunDir, rep: Replica, env: dict[str, str], log_suffix: str = "") -> ChildSpec:
    """The `inference @ configs/<name>.toml` child of replica `rep`."""
    argv = [sys.executable, "-m", "prime_rl.cli.inference", "@", str(config_path(run, rep))]
    return ChildSpec(rep.name, argv, run.log_file(f"{rep.name}{log_suffix}.console"), env)
