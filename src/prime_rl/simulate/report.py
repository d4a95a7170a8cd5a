"""What a simulated deployment predicts: step time, throughput, GPU idle fractions, off-policy distribution.

Averages cover the steady window: from the end of trainer step `warmup_steps` (its publish done) to the end of the
last step. Step time is the trainer's (window / steps in it); the orchestrator's step time (`step_time_s` in its
metrics: batch cut to batch cut) averages the same in steady state and is given too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from prime_rl.config.plan import PlanConfig
from prime_rl.simulate.pipeline import Pipeline


@dataclass
class PlanResult:
    """The prediction for one deployment (seconds, fractions in [0, 1], tokens, rollouts).

    `control_plane_busy`, `scheduler_busy`: CPU of the busiest control-plane worker and of the scheduler process
    over the window, as a fraction of one core.

    `off_policy_tokens`: lag (versions between the trainer's policy N - 1 and the turn's policy) -> share of the
    trained completion tokens in the window. `max_off_policy`: per step in the window, the orchestrator's metric of
    the same name (the largest lag of a group in the batch)."""

    gpus: int
    inference_gpus: int
    trainer_gpus: int
    step_time_s: float
    orchestrator_step_time_s: float
    rollouts_per_s: float
    trained_tokens_per_s: float
    sampled_tokens_per_s: float
    inference_idle: float
    inference_loading: float
    inference_mean_batch: float
    trainer_idle: float
    control_plane_busy: float
    scheduler_busy: float
    max_off_policy: list[int]
    off_policy_tokens: dict[int, float]
    dropped_groups: int
    steps: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lag keys as strings)."""
        out = asdict(self)
        out["off_policy_tokens"] = {str(k): v for k, v in self.off_policy_tokens.items()}
        return out

    @property
    def mean_off_policy(self) -> float:
        """Token-weighted mean lag of the trained tokens (versions)."""
        return float(sum(k * v for k, v in self.off_policy_tokens.items()))


def result(pipe: Pipeline) -> PlanResult:
    """Summarise a finished `Pipeline` over its steady window."""
    cfg: PlanConfig = pipe.cfg
    start, end = pipe.marks["start"], pipe.marks["end"]
    window = float(end["t"]) - float(start["t"])
    n_steps = cfg.steps - cfg.warmup_steps
    steady = [r for r in pipe.cuts if cfg.warmup_steps < r.step <= cfg.steps]
    cut_t = [r.cut_t for r in pipe.cuts if cfg.warmup_steps <= r.step <= cfg.steps]
    orch = float(np.mean(np.diff(cut_t))) if len(cut_t) > 1 else float("nan")
    n_rep = len(pipe.replicas)

    def diff(key: str) -> np.ndarray:
        return np.asarray(end[key], dtype=float) - np.asarray(start[key], dtype=float)

    busy, load, seq, toks = diff("busy"), diff("load"), diff("seq"), diff("tokens")
    decode_busy = float(busy.sum())
    lags: dict[int, int] = {}
    for rec in steady:
        for lag, tokens in rec.lag_tokens.items():
            lags[lag] = lags.get(lag, 0) + tokens
    total = sum(lags.values()) or 1
    workers = diff("workers")
    return PlanResult(
        gpus=n_rep * cfg.inference.gpus_per_replica + cfg.trainer.gpus,
        inference_gpus=n_rep * cfg.inference.gpus_per_replica,
        trainer_gpus=cfg.trainer.gpus,
        step_time_s=window / n_steps,
        orchestrator_step_time_s=orch,
        rollouts_per_s=cfg.pipeline.batch_size * n_steps / window,
        trained_tokens_per_s=sum(r.tokens for r in steady) / window,
        sampled_tokens_per_s=float(toks.sum()) / window,
        inference_idle=max(0.0, 1.0 - float((busy + load).sum()) / (window * n_rep)),
        inference_loading=float(load.sum()) / (window * n_rep),
        inference_mean_batch=float(seq.sum()) / decode_busy if decode_busy > 0 else 0.0,
        trainer_idle=max(0.0, 1.0 - (float(end["trainer"]) - float(start["trainer"])) / window),
        control_plane_busy=float(workers.max()) / window if len(workers) else 0.0,
        scheduler_busy=(float(end["scheduler"]) - float(start["scheduler"])) / window,
        max_off_policy=[r.max_off_policy for r in steady],
        off_policy_tokens={k: lags[k] / total for k in sorted(lags)},
        dropped_groups=sum(r.dropped_groups for r in steady),
        steps=[{"step": r.step, "cut_s": r.cut_t, "train_start_s": r.train_start, "train_end_s": r.train_end,
                "tokens": r.tokens, "max_off_policy": r.max_off_policy} for r in pipe.cuts if r.step <= cfg.steps],
    )


def simulate(cfg: PlanConfig) -> PlanResult:
    """Run the model of `cfg` and summarise it (deterministic for a given `cfg.seed`)."""
    return result(Pipeline(cfg).run())


def rate(value: float) -> str:
    """A rate for the console report: 4 significant digits below 10,000, whole numbers with thousands separators
    from there (`12,090`, never `1.209e+04`)."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


def format_result(cfg: PlanConfig, res: PlanResult) -> str:
    """The console report of one simulated deployment."""
    lag = ", ".join(f"{k}: {100 * v:.1f}%" for k, v in res.off_policy_tokens.items())
    mx = res.max_off_policy
    lines = [
        f"deployment: {res.inference_gpus} inference GPU(s) in {cfg.inference.replicas} replica(s), "
        f"{res.trainer_gpus} trainer GPU(s), {cfg.control_plane.workers} control-plane worker(s); batch "
        f"{cfg.pipeline.batch_size} rollouts (groups of {cfg.pipeline.group_size}), max_async_level "
        f"{cfg.pipeline.max_async_level}, weights by {cfg.weights.transport}",
        f"steps {cfg.warmup_steps + 1}..{cfg.steps} (after {cfg.warmup_steps} warm-up steps):",
        f"  step time            {res.step_time_s:.4g} s (orchestrator, cut to cut: {res.orchestrator_step_time_s:.4g} s)",
        f"  throughput           {rate(res.rollouts_per_s)} rollouts/s, {rate(res.trained_tokens_per_s)} trained tokens/s, "
        f"{rate(res.sampled_tokens_per_s)} sampled tokens/s",
        f"  inference GPUs       idle {100 * res.inference_idle:.1f}%, loading weights "
        f"{100 * res.inference_loading:.1f}%, mean batch {res.inference_mean_batch:.1f} sequences while decoding",
        f"  trainer GPUs         idle {100 * res.trainer_idle:.1f}%",
        f"  control plane        busiest worker {100 * res.control_plane_busy:.1f}% of one core, scheduler "
        f"{100 * res.scheduler_busy:.1f}% of one core",
        f"  off-policy (tokens)  {lag}",
        f"  max off-policy/step  min {min(mx)}, mean {np.mean(mx):.2f}, max {max(mx)}; dropped groups "
        f"{res.dropped_groups}",
    ]
    return "\n".join(lines)
