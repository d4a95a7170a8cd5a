"""The capacity table of `prime-rl plan --capacity`: a 4B model on 8, 64, 512 and 1,024 GPUs, GridSim-like work.

Inputs (`CapacityInputs`, each with its source in docs/scaling.md, "Planning a deployment"):

- trainer: trained tokens/s per GPU, full fine-tuning of Qwen3-4B (PrimeIntellect's prime-rl trainer benchmark);
- inference: decode tokens/s of one vLLM replica per GPU with many sequences in flight, and of one sequence alone;
- weights: 8 GB per policy version (4B parameters in bf16), moved by broadcast or through a filesystem;
- control plane, over HTTP with rollout workers (docs/results/2026-12-04-control-plane-workers-quiet.md): CPU per
  turn of the agent loop in a worker, and CPU per rollout of the one scheduler (orchestrator) process, scaled from
  the benchmark's rollout to this workload's by trained tokens (decoding, packing, rank files and archive handle
  every token);
- workload: 4 turns, a 1,000-token prompt, 200 sampled and 70 environment tokens per turn (~2,000 tokens a
  rollout), 30 ms of environment latency per turn, groups of 8, 8 rollouts per step per GPU.

For each size the inference/trainer split starts where the two sides' rates balance (`balanced_split`); that
split and 10% more inference GPUs, each at `max_async_level` 1, 2 and 3, are simulated, and the row keeps the
fastest at the lowest level within 5% of the best step time (each level adds about a version of lag).
Control-plane workers: enough cores to keep each below `cpu_target` busy at the row's rollout rate. The scheduler
is one process whatever the workers: where it is busy near 100% of its core, it bounds the row at
`1 / scheduler_cpu_per_rollout_s` rollouts/s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from prime_rl.config.plan import PlanConfig
from prime_rl.simulate.report import PlanResult, simulate


@dataclass(frozen=True)
class CapacityInputs:
    """Per-GPU rates and workload of the table (units in the names)."""

    trainer_tokens_per_s_per_gpu: float = 27_440 / 8
    inference_peak_tokens_per_s: float = 6_595.66 / 2 * 14.8 / 4.0
    inference_peak_batch: int = 256
    inference_single_seq_tokens_per_s: float = 290.0
    prefill_tokens_per_s: float = 50_000.0
    weight_gb: float = 8.0
    broadcast_gb_per_s: float = 25.0
    filesystem_gb_per_s: float = 2.0
    cpu_per_turn_s: float = 0.0011
    scheduler_cpu_per_rollout_measured_s: float = 0.0012
    scheduler_measured_rollout_tokens: int = 1580
    cpu_target: float = 0.7
    env_latency_s: float = 0.03
    prompt_tokens: int = 1000
    turns: int = 4
    completion_tokens: int = 200
    env_tokens: int = 70
    group_size: int = 8
    rollouts_per_gpu_per_step: int = 8

    @property
    def rollout_tokens(self) -> int:
        """Trained tokens of one rollout (prompt, samples, environment answers)."""
        return self.prompt_tokens + self.turns * self.completion_tokens + (self.turns - 1) * self.env_tokens

    @property
    def scheduler_cpu_per_rollout_s(self) -> float:
        """The scheduler's CPU seconds per rollout of this workload: the measured cost per rollout of
        `scheduler_measured_rollout_tokens` tokens, scaled by `rollout_tokens`."""
        return self.scheduler_cpu_per_rollout_measured_s * self.rollout_tokens / self.scheduler_measured_rollout_tokens


@dataclass
class CapacityRow:
    """One deployment size: its chosen layout and what the simulator predicts for it."""

    gpus: int
    inference_gpus: int
    trainer_gpus: int
    batch_size: int
    max_async_level: int
    workers: int
    result: PlanResult
    filesystem_step_time_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        out = {k: v for k, v in asdict(self).items() if k != "result"}
        out["result"] = self.result.to_dict()
        return out


def balanced_split(gpus: int, inputs: CapacityInputs) -> int:
    """Inference GPUs at which inference's rate meets the trainer's (rollouts/s), at least 1: a rollout costs an
    inference GPU its sampled tokens at the peak rate plus its prefill (prompt, environment answers)."""
    sample_s = inputs.turns * inputs.completion_tokens / inputs.inference_peak_tokens_per_s
    prefill_s = (inputs.prompt_tokens + (inputs.turns - 1) * inputs.env_tokens) / inputs.prefill_tokens_per_s
    per_inf = 1.0 / (sample_s + prefill_s)
    per_train = inputs.trainer_tokens_per_s_per_gpu / inputs.rollout_tokens
    share = per_train / (per_inf + per_train)
    return max(1, min(gpus - 1, round(gpus * share)))


def plan_config(gpus: int, n_inf: int, level: int, workers: int, inputs: CapacityInputs, *,
                transport: str = "broadcast", seed: int = 0, steps: int = 16,
                warmup: int = 8) -> PlanConfig:  # fmt: skip
    """The simulator config of one layout. The averages cover steps `warmup + 1 .. steps`: a scheduler-bound
    layout first cuts a few batches back to back (its queue interleaves many groups) and the trainer drains them
    over the next steps, so the window starts well after that."""
    batch = inputs.rollouts_per_gpu_per_step * gpus
    gb = inputs.broadcast_gb_per_s if transport == "broadcast" else inputs.filesystem_gb_per_s
    move = inputs.weight_gb / gb
    return PlanConfig.model_validate({
        "inference": {"replicas": n_inf, "single_seq_tokens_per_s": inputs.inference_single_seq_tokens_per_s,
                      "peak_tokens_per_s": inputs.inference_peak_tokens_per_s,
                      "peak_batch": inputs.inference_peak_batch,
                      "prefill_tokens_per_s": inputs.prefill_tokens_per_s},
        "trainer": {"gpus": gpus - n_inf, "tokens_per_s": inputs.trainer_tokens_per_s_per_gpu * (gpus - n_inf)},
        "weights": {"transport": transport, "publish_s": move, "load_s": move},
        "env": {"latency_s": inputs.env_latency_s},
        "control_plane": {"workers": workers, "cpu_per_turn_s": inputs.cpu_per_turn_s,
                          "scheduler_cpu_per_rollout_s": inputs.scheduler_cpu_per_rollout_s},
        "workload": {"prompt_tokens": inputs.prompt_tokens, "turns": inputs.turns,
                     "completion_tokens": inputs.completion_tokens,
                     "env_tokens": inputs.env_tokens},
        "pipeline": {"batch_size": batch, "group_size": inputs.group_size, "max_async_level": level,
                     "max_inflight": max(batch, n_inf * inputs.inference_peak_batch)},
        "steps": steps, "warmup_steps": warmup, "seed": seed,
    })  # fmt: skip


def workers_for(rollouts_per_s: float, inputs: CapacityInputs) -> int:
    """Control-plane processes that keep each below `cpu_target` of a core at `rollouts_per_s`."""
    return max(1, math.ceil(rollouts_per_s * inputs.turns * inputs.cpu_per_turn_s / inputs.cpu_target))


def capacity_row(gpus: int, inputs: CapacityInputs, seed: int = 0) -> CapacityRow:
    """Choose the split and `max_async_level` for `gpus` GPUs by simulation (see the module docstring)."""
    n0 = balanced_split(gpus, inputs)
    per_train = inputs.trainer_tokens_per_s_per_gpu / inputs.rollout_tokens
    workers = workers_for(per_train * (gpus - n0), inputs)
    cands = sorted({n for n in (n0, n0 + max(1, n0 // 10)) if 1 <= n < gpus})
    runs: list[tuple[float, int, int, PlanResult]] = []
    for n_inf in cands:
        for level in (1, 2, 3):
            res = simulate(plan_config(gpus, n_inf, level, workers, inputs, seed=seed))
            runs.append((res.step_time_s, level, n_inf, res))
    best = min(r[0] for r in runs)
    step, level, n_inf, res = min((r for r in runs if r[0] <= 1.05 * best), key=lambda r: (r[1], r[0]))
    fs = simulate(plan_config(gpus, n_inf, level, workers, inputs, transport="filesystem", seed=seed))
    return CapacityRow(gpus, n_inf, gpus - n_inf, inputs.rollouts_per_gpu_per_step * gpus, level,
                       workers_for(res.rollouts_per_s, inputs), res, fs.step_time_s)  # fmt: skip


def capacity_table(sizes: tuple[int, ...] = (8, 64, 512, 1024), inputs: CapacityInputs | None = None,
                   seed: int = 0) -> list[CapacityRow]:  # fmt: skip
    """One `CapacityRow` per size."""
    inputs = inputs or CapacityInputs()
    return [capacity_row(g, inputs, seed) for g in sizes]


def format_table(rows: list[CapacityRow]) -> str:
    """The table as markdown."""
    head = ("| GPUs | inference / trainer GPUs | rollouts per step | max_async_level | step s (broadcast) | "
            "step s (filesystem) | rollouts/s | trained tokens/s | inference idle | trainer idle | mean off-policy | "
            "control-plane workers | scheduler CPU (one core) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    lines = [head]
    for row in rows:
        res = row.result
        lines.append(
            f"| {row.gpus:,} | {row.inference_gpus} / {row.trainer_gpus} | {row.batch_size:,} | "
            f"{row.max_async_level} | "
            f"{res.step_time_s:.2f} | {row.filesystem_step_time_s:.2f} | {res.rollouts_per_s:,.0f} | "
            f"{res.trained_tokens_per_s:,.0f} | {100 * res.inference_idle:.0f}% | {100 * res.trainer_idle:.0f}% | "
            f"{res.mean_off_policy:.2f} | {row.workers} | {100 * res.scheduler_busy:.0f}% |"
        )
    return "\n".join(lines)


__all__ = ["CapacityInputs", "CapacityRow", "balanced_split", "capacity_row", "capacity_table", "format_table",
           "plan_config", "workers_for"]  # fmt: skip
