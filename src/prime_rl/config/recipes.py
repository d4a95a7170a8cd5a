"""Configuration of the orchestrator's training recipes: the signal gate with refill (`[orchestrator.gate]`), the
difficulty-pool curriculum (`[orchestrator.curriculum]`) and the length penalty (`length_penalty` of a source)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from prime_rl.config.base import BaseConfig


class GateConfig(BaseConfig):
    """Reject groups without a learning signal at admission and sample replacements (DAPO's dynamic sampling).

    Off unless `reject_uniform` is true or `advantage_range` is set.
    """

    reject_uniform: bool = Field(
        False, description="Reject a group whose unmasked rollouts all have the same reward (every advantage is 0)."
    )
    advantage_range: tuple[float, float] | None = Field(
        None,
        description="Reject a group whose largest |advantage| lies outside [low, high]; None = no range check.",
    )
    max_resample_factor: float = Field(
        2.0,
        ge=1.0,
        description="A step examines groups holding at most ceil(factor * batch_size) rollouts (ceil(factor * "
        "batch_size / group_size) groups of one size); when they are spent, it trains the groups that passed and "
        "fills the batch with rejected ones, out of the loss (logged).",
    )
    keep_for_kl: bool = Field(
        False,
        description="Admit groups whose advantages are all 0 (their reference-KL term still trains); `rl` sets it "
        "when trainer.loss.ref_kl_coef > 0.",
    )

    @property
    def enabled(self) -> bool:
        """Whether the gate rejects anything."""
        return self.reject_uniform or self.advantage_range is not None

    @model_validator(mode="after")
    def _range(self) -> GateConfig:
        if self.advantage_range is not None:
            low, high = self.advantage_range
            if not (0 <= low < high):
                raise ValueError(f"advantage_range = [{low:g}, {high:g}]: use 0 <= low < high (bounds on |advantage|)")
        return self


class CurriculumConfig(BaseConfig):
    """Which tasks the train stream plays more often. `difficulty_pool`: a task whose recent rollouts all passed
    (easy) or all failed (hard) is drawn with a lower weight."""

    sampler: Literal["uniform", "difficulty_pool"] = Field("uniform", description="uniform = every task alike.")
    window: int = Field(16, gt=0, description="Recent rollouts per task that make its pass rate.")
    min_rollouts: int = Field(4, gt=0, description="Rollouts a task needs in its window before it counts as easy/hard.")
    easy_weight: float = Field(0.1, gt=0, le=1, description="Sampling weight of a task whose window is all passes.")
    hard_weight: float = Field(0.1, gt=0, le=1, description="Sampling weight of a task whose window is all failures.")
    pass_threshold: float = Field(
        1.0, description="A rollout passes when its reward (before shaping) is at least this."
    )

    @model_validator(mode="after")
    def _min_within_window(self) -> CurriculumConfig:
        if self.min_rollouts > self.window:
            raise ValueError(
                f"curriculum.min_rollouts ({self.min_rollouts}) is above curriculum.window ({self.window})"
            )
        return self


class LengthPenaltyConfig(BaseConfig):
    """DAPO's overlong penalty (Yu et al. 2025, arXiv:2503.14476, eq. 13), added to a rollout's reward before
    advantages: with L its sampled tokens, `-coef * min(1, max(0, L - (max_tokens - cache_tokens)) / cache_tokens)`,
    i.e. 0 up to the soft budget `max_tokens - cache_tokens`, then linear down to `-coef` at `max_tokens`."""

    max_tokens: int = Field(..., gt=0, description="L_max: sampled tokens at which the full penalty applies.")
    cache_tokens: int = Field(..., gt=0, description="L_cache: width of the linear zone below max_tokens.")
    coef: float = Field(1.0, ge=0, description="The penalty at and beyond max_tokens.")

    @model_validator(mode="after")
    def _cache_within_max(self) -> LengthPenaltyConfig:
        if self.cache_tokens > self.max_tokens:
            raise ValueError(
                f"length_penalty.cache_tokens ({self.cache_tokens}) is above max_tokens ({self.max_tokens})"
            )
        return self
