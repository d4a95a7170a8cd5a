"""What a finished `rl` run measured, read from its run directory, as simulator inputs and as the values to predict.

From `metrics.jsonl`: the trainer's pass (`step_time_s`), trained tokens (`tokens`) and publish time (`publish_s`)
per step, its rows' wall-clock `time` (written after the publish: their differences are the publish-to-publish step
time), the orchestrator's weight loads (`weight_load_s`), sequence lengths and loss tokens per rollout, and its
`max_off_policy` per step. From `rollouts/step_N/traces.jsonl` (all rollouts of a step with
`orchestrator.traces_per_step` >= batch size): each rollout's policy versions, hence the off-policy lag of every
turn. Means over steps `first..last` keep the vLLM start, the first eval and the last step out.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prime_rl.monitor.metrics import read_metrics


@dataclass
class RunMeasurement:
    """Means over steps `first..last` of one run (seconds, tokens), and its off-policy counts."""

    first: int
    last: int
    step_time_s: float
    trainer_pass_s: float
    trainer_tokens: float
    publish_s: float
    weight_load_s: float
    seq_len_mean: float
    loss_tokens_per_rollout: float
    max_off_policy: list[int]
    off_policy_turns: dict[int, int]

    @property
    def mean_off_policy(self) -> float:
        """Mean lag of the traced turns (versions); NaN without traces."""
        total = sum(self.off_policy_turns.values())
        return sum(k * v for k, v in self.off_policy_turns.items()) / total if total else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lag keys as strings)."""
        out = asdict(self)
        out["off_policy_turns"] = {str(k): v for k, v in self.off_policy_turns.items()}
        out["mean_off_policy"] = self.mean_off_policy
        return out


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        raise ValueError(f"no {key!r} in the metrics rows")
    return float(statistics.fmean(vals))


def measure_run(run: Path, first: int = 3, last: int | None = None) -> RunMeasurement:
    """Read `run`'s metrics and traces over steps `first..last` (default: up to the second-to-last step).

    Raises:
        FileNotFoundError: `run/metrics.jsonl` is missing.
        ValueError: the run has too few steps, or a metric is missing.
    """
    run = Path(run)
    if not (run / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{run / 'metrics.jsonl'} does not exist: not a finished rl run directory")
    trainer = sorted(read_metrics(run, "trainer"), key=lambda r: r["step"])
    orch = sorted(read_metrics(run, "orchestrator"), key=lambda r: r["step"])
    top = max((r["step"] for r in trainer), default=0)
    last = top - 1 if last is None else last
    if last < first or top < 2:
        raise ValueError(f"{run}: steps {first}..{last} hold no step (the trainer logged {top})")
    t_by_step = {r["step"]: r for r in trainer}
    tr = [r for r in trainer if first <= r["step"] <= last]
    orr = [r for r in orch if first <= r["step"] <= last]
    gaps = [t_by_step[s]["time"] - t_by_step[s - 1]["time"] for s in range(first, last + 1)
            if s in t_by_step and s - 1 in t_by_step]  # fmt: skip
    lags: dict[int, int] = {}
    for step in range(first, last + 1):
        path = run / "rollouts" / f"step_{step}" / "traces.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            for version in row.get("policy_versions") or []:
                lags[(step - 1) - int(version)] = lags.get((step - 1) - int(version), 0) + 1
    loss = [r["loss_tokens"] / r["num_rollouts"] for r in orr if r.get("num_rollouts")]
    return RunMeasurement(
        first=first, last=last, step_time_s=float(statistics.fmean(gaps)), trainer_pass_s=_mean(tr, "step_time_s"),
        trainer_tokens=_mean(tr, "tokens"), publish_s=_mean(tr, "publish_s"),
        weight_load_s=_mean(orr, "weight_load_s"), seq_len_mean=_mean(orr, "seq_len_mean"),
        loss_tokens_per_rollout=float(statistics.fmean(loss)) if loss else float("nan"),
        max_off_policy=[int(r["max_off_policy"]) for r in orr], off_policy_turns=dict(sorted(lags.items())),
    )  # fmt: skip


@dataclass
class TraceShape:
    """Mean rollout shape over traced rollouts: turns, first-prompt and per-answer environment characters (tokens
    for a byte-level tokenizer such as the tiny models'), sampled characters per turn."""

    turns: float
    prompt_chars: float
    env_chars_per_turn: float
    rollouts: int


def trace_shape(run: Path, first: int, last: int) -> TraceShape:
    """The rollout shape of `run`'s traced rollouts in steps `first..last`.

    Raises:
        ValueError: no traces in that range.
    """
    turns, prompt, env, traces = 0.0, 0.0, 0.0, 0
    for step in range(first, last + 1):
        path = Path(run) / "rollouts" / f"step_{step}" / "traces.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            msgs = row.get("messages") or []
            first_reply = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), len(msgs))
            prompt += sum(len(str(m.get("content") or "")) for m in msgs[:first_reply])
            num_turns = max(1, int(row.get("turns") or 1))
            tool_chars = sum(len(str(m.get("content") or "")) for m in msgs[first_reply:] if m.get("role") == "tool")
            env += tool_chars / max(1, num_turns - 1)
            turns += num_turns
            traces += 1
    if traces == 0:
        raise ValueError(f"{run}: no traces.jsonl in steps {first}..{last} (orchestrator.traces_per_step = 0?)")
    return TraceShape(turns / traces, prompt / traces, env / traces, traces)


def plan_for_run(run: Path, meas: RunMeasurement, inference: dict[str, float], *, cpu_per_turn_s: float,
                 env_latency_s: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """The `PlanConfig` fields (a dict) that model `run`: its orchestrator settings (`configs/orchestrator.toml`),
    the measured trainer, publish and weight-load times, its traced rollout shape, and the given inference and
    control-plane inputs (measured apart: `benchmarks/plan_inputs.py`). The first prompt's tokens are the mean
    sequence length less the sampled tokens and the environment answers (characters of the traced tool messages).

    Raises:
        ValueError: the run's train sources have different group sizes (the plan models one)."""
    import tomllib

    orch = tomllib.loads((Path(run) / "configs" / "orchestrator.toml").read_text())
    group = orch.get("train", {}).get("group_size", 1)
    sizes = {src.get("group_size") or group for src in orch.get("train", {}).get("source", [])} or {group}
    if len(sizes) > 1:
        raise ValueError(f"{run}: the train sources' group sizes differ ({sorted(sizes)}, orchestrator.train.source.*"
                         ".group_size); the plan models one group size: set pipeline.group_size in the plan config")
    group = sizes.pop()
    shape = trace_shape(run, meas.first, meas.last)
    turns = max(1, round(shape.turns))
    env_tokens = round(shape.env_chars_per_turn)
    prompt = meas.seq_len_mean - meas.loss_tokens_per_rollout - env_tokens * (shape.turns - 1)
    steps = meas.last
    return {
        "inference": dict(inference),
        "trainer": {"tokens_per_s": meas.trainer_tokens / meas.trainer_pass_s},
        "weights": {"publish_s": meas.publish_s, "load_s": meas.weight_load_s},
        "env": {"latency_s": env_latency_s},
        "control_plane": {"workers": 1, "cpu_per_turn_s": cpu_per_turn_s},
        "workload": {"prompt_tokens": max(0, round(prompt)), "turns": turns,
                     "completion_tokens": max(1.0, meas.loss_tokens_per_rollout / shape.turns),
                     "env_tokens": env_tokens},
        "pipeline": {"batch_size": orch.get("batch_size", 64), "group_size": group,
                     "max_async_level": orch.get("max_async_level", 1),
                     "max_off_policy_steps": orch.get("max_off_policy_steps", 8),
                     "max_inflight": orch.get("concurrency", {}).get("max_inflight", 32)},
        "steps": steps, "warmup_steps": meas.first - 1,
    }  # fmt: skip
