"""Device placement from `[deployment]`: which GPUs each child sees, how many trainer ranks, how many threads.

GPU: the trainer gets the first `num_train_gpus` visible devices (one torchrun rank each), inference the next
`num_infer_gpus` (vLLM data parallel over them unless tensor/data parallel sizes are set to cover them; none with a
custom `orchestrator.backend` and no teacher: rl starts no inference server then).
CPU: both share the cores. The trainer runs `cpu_train_procs` ranks (default 1) with `trainer.threads` torch
threads each (default: half the cores, split over the ranks, at least 1); orchestrator and env server get one
thread each; inference keeps vLLM's own CPU settings (the inference part chooses them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from prime_rl.config.rl import RLConfig
from prime_rl.config.teacher import shared_gpu_problem
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.fields import as_set


@dataclass
class Placement:
    device: str  # "cpu" or "cuda"
    trainer_procs: int
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # child name -> extra environment
    updates: dict[str, Any] = field(default_factory=dict)  # dotted config field -> value the placement implies

    def env_for(self, name: str) -> dict[str, str]:
        return dict(self.env.get(name, {}))

    def replica_env(self, local_index: int, per_node: int) -> dict[str, str]:
        """The environment of inference replica `local_index` of `per_node` on this node: on GPU its own equal
        slice of the inference GPUs, on CPU the shared inference environment."""
        env = self.env_for("inference")
        gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        if self.device == "cuda" and gpus:
            per = len(gpus) // per_node
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[local_index * per : (local_index + 1) * per])
        return env


def visible_gpus() -> list[str]:
    """GPU ids this process may use: `CUDA_VISIBLE_DEVICES` when set, else `nvidia-smi -L` (no torch import)."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [d.strip() for d in cvd.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def cpu_count() -> int:
    """Cores this process may run on (affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def place(
    cfg: RLConfig, gpus: list[str] | None = None, ncores: int | None = None, roles: set[str] | None = None
) -> Placement:
    """Decide the placement; `cfg` is not changed. What the placement implies for the configs
    (`orchestrator.num_train_ranks`, `trainer.threads` on CPU, vLLM data parallel size on GPU) is in
    `Placement.updates` (dotted field -> value; `plan.evolve` applies it to a copy). `roles`: the roles of this node in a multi-node run
    (a trainer node needs only `num_train_gpus`, an inference node only `num_infer_gpus`); None = every role here.

    Raises:
        PreflightError: fewer GPUs than `num_train_gpus + num_infer_gpus`, vLLM parallel sizes that do not
            multiply to `num_infer_gpus`, or a `[teacher]` server and inference replica 0 whose
            `gpu_memory_utilization` shares of the GPU they share sum above 0.95 (`config.teacher.shared_gpu_problem`).
    """
    gpus = visible_gpus() if gpus is None else gpus
    dep = cfg.deployment
    if not gpus:
        ncores = ncores or cpu_count()
        procs = dep.cpu_train_procs
        threads = cfg.trainer.threads or max(1, ncores // 2 // procs)
        one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        return Placement(
            device="cpu",
            trainer_procs=procs,
            env={
                "trainer": {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""},
                "orchestrator": {**one, "CUDA_VISIBLE_DEVICES": ""},
                "env-server": {**one, "CUDA_VISIBLE_DEVICES": ""},
                "inference": {"CUDA_VISIBLE_DEVICES": ""},
            },
            updates={"trainer.threads": threads, "orchestrator.num_train_ranks": procs},
        )
    nt, ni = dep.num_train_gpus, dep.num_infer_gpus
    want_t = roles is None or "trainer" in roles
    # a custom backend samples from its own engine: the inference GPUs serve only a teacher, if any
    want_i = (roles is None or "inference" in roles) and (cfg.orchestrator.backend.type == "server" or cfg.teacher is not None)
    need = (nt if want_t else 0) + (ni if want_i else 0)
    if need > len(gpus):
        fields = " + ".join(f for f, w in (("deployment.num_train_gpus", want_t), ("deployment.num_infer_gpus", want_i)) if w)
        raise PreflightError(
            f"{fields} = {need} GPUs, but only {len(gpus)} are visible on this node ({','.join(gpus)}); lower them or "
            f"expose more GPUs (CUDA_VISIBLE_DEVICES)"
        )
    t_gpus = gpus[:nt] if want_t else []
    i_gpus = gpus[len(t_gpus) : len(t_gpus) + ni] if want_i else []
    rpn = dep.infer_replicas_per_node
    if ni % rpn:
        raise PreflightError(
            f"deployment.num_infer_gpus ({ni}) must be a multiple of deployment.infer_replicas_per_node ({rpn}): "
            f"each replica gets the same number of GPUs"
        )
    per = ni // rpn
    if want_i and (problem := shared_gpu_problem(cfg, lambda field: as_set(cfg, field)[1])):
        raise PreflightError(problem)
    vllm = cfg.inference.vllm
    updates: dict[str, Any] = {"orchestrator.num_train_ranks": nt}
    if vllm.tensor_parallel_size * vllm.data_parallel_size != per:
        if vllm.tensor_parallel_size == 1 and vllm.data_parallel_size == 1:
            updates["inference.vllm.data_parallel_size"] = per
        else:
            raise PreflightError(
                f"inference.vllm.tensor_parallel_size ({vllm.tensor_parallel_size}) x data_parallel_size "
                f"({vllm.data_parallel_size}) must equal the GPUs of one replica: deployment.num_infer_gpus ({ni}) / "
                f"deployment.infer_replicas_per_node ({rpn}) = {per}"
            )
    return Placement(
        device="cuda",
        trainer_procs=nt,
        env={
            "trainer": {"CUDA_VISIBLE_DEVICES": ",".join(t_gpus)},
            "inference": {"CUDA_VISIBLE_DEVICES": ",".join(i_gpus)},
            "orchestrator": {"CUDA_VISIBLE_DEVICES": ""},
            "env-server": {"CUDA_VISIBLE_DEVICES": ""},
        },
        updates=updates,
    )
