"""Inference replicas: independent `inference` servers of one run, each with its own config file, port, log and
(on GPU) slice of the inference GPUs. The orchestrator gets one URL per replica (`orchestrator.client.base_url`)
and spreads requests over the healthy ones. Where each replica binds and listens: `layout.py`.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

from prime_rl.config.inference import InferenceConfig, flag_name
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


def admin_token(cfg: RLConfig, replicas: list[Replica], environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The config changes that give a run's replicas and its orchestrator one shared admin token: an inference server
    bound beyond loopback (the node's address in a multi-node run) closes `/update_weights` without a token
    (`prime_rl.inference.guard`), so when no token is configured (`inference.server.token`,
    `PRIME_RL_INFERENCE_TOKEN`, vLLM's `--api-key`) and a replica binds beyond loopback, `orchestrator.client.api_key`
    (or a random token when it is unset) is set as `inference.server.token` and `orchestrator.client.api_key`. Empty when nothing needs changing; `cfg` is not
    changed. (A configured token that the orchestrator does not send is refused earlier, by
    `config.rl.check_inference_access`.)"""
    from prime_rl.http import is_loopback

    env = os.environ if environ is None else environ
    vllm_key = any(flag_name(k) == "api-key" for k in cfg.inference.vllm.extra_args)
    if cfg.inference.server.token or env.get("PRIME_RL_INFERENCE_TOKEN") or env.get("VLLM_API_KEY") or vllm_key:
        return {}
    if all(is_loopback(r.bind_host) for r in replicas):
        return {}
    token = cfg.orchestrator.client.api_key or secrets.token_urlsafe(24)
    return {"inference.server.token": token, "orchestrator.client.api_key": token}


def config_path(run: RunDir, rep: Replica) -> Path:
    """`configs/inference.toml` for replica 0, `configs/inference-<i>.toml` for the others."""
    return run.configs / f"{rep.name}.toml"


def replica_spec(run: RunDir, rep: Replica, env: dict[str, str], log_suffix: str = "") -> ChildSpec:
    """The `inference @ configs/<name>.toml` child of replica `rep`."""
    argv = [sys.executable, "-m", "prime_rl.cli.inference", "@", str(config_path(run, rep))]
    return ChildSpec(rep.name, argv, run.log_file(f"{rep.name}{log_suffix}.console"), env)
