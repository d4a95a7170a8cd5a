"""`evals`' `[checkpoints]` section: evaluate a run's policy versions (`weights/step_N`) instead of one model."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig


class EvalCheckpointsConfig(BaseConfig):
    """Which of a run's checkpoints `evals` scores (prime_rl.orchestrator.eval_sweep): a sweep over the stable
    `run_dir/weights/step_N` (every `every`-th, or the `steps` listed), or with `watch` each new one as the run
    publishes it. Results go to `output_dir/<model>/step_N.{jsonl,json}`; steps already there are skipped."""

    run_dir: Path | None = Field(
        None, description="A run's output_dir whose weights/step_N (with STABLE) are evaluated; None = evaluate "
        "model.name once, as step 0.",
    )
    every: int = Field(1, gt=0, description="Evaluate the steps that are multiples of this (sweep and watch).")
    steps: list[int] | None = Field(None, description="Evaluate exactly these steps (instead of `every`).")
    watch: bool = Field(
        False, description="Keep watching run_dir for new stable versions until `until_step` is evaluated or none "
        "came for `timeout_s`.",
    )
    until_step: int | None = Field(
        None, ge=0, description="watch: stop after evaluating this step (e.g. the run's max_steps); None = only the "
        "timeout ends the watch.",
    )
    timeout_s: float = Field(3600.0, gt=0, description="watch: stop when no new stable version came for this long.")
    poll_s: float = Field(5.0, gt=0, description="watch: seconds between looks at run_dir/weights.")
    plot: bool = Field(
        True, description="Draw avg@k and pass@k across steps (output_dir/<model>/sweep.png; matplotlib)."
    )

    @model_validator(mode="after")
    def _needs_run(self) -> EvalCheckpointsConfig:
        if self.run_dir is None and (self.watch or self.steps is not None):
            raise ValueError("checkpoints.watch and checkpoints.steps need checkpoints.run_dir (the run whose "
                             "weights/step_N are evaluated)")
        return self
