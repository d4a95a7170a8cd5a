"""Configuration of the orchestrator's training recipes: the signal gate with refill (`[orchestrator.gate]`), the
difficulty-pool curriculum (`[orchestrator.curriculum]`) and the length penalty (`length_penalty` of a source)."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal

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
        "fills the batch with rejected ones, out of the loss (logged). Set while reject_uniform and advantage_range "
        "are unset, it is refused (it turns nothing on); with reject_uniform = false set, warned about.",
    )
    keep_for_kl: bool = Field(
        False,
        description="Admit groups whose advantages are all 0 (their reference-KL or teacher term still trains). "
        "Under `rl` the loss decides it: set when trainer.loss.ref_kl_coef > 0 or the loss has a teacher term; a "
        "value set against the loss is refused. A standalone orchestrator takes it as the trainer's word that its "
        "loss has such a term.",
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

    @model_validator(mode="after")
    def _factor_needs_a_criterion(self) -> GateConfig:
        """`max_resample_factor` set while no rejection criterion ever was: refused (the factor alone does not turn
        the gate on). A criterion set off explicitly (a layered config turning a base's gate off) is only warned
        about (`inert_recipe_settings`)."""
        if "max_resample_factor" in self.model_fields_set and not self.enabled and not (
                {"reject_uniform", "advantage_range"} & self.model_fields_set):  # fmt: skip
            raise ValueError(_inert_factor(self))
        return self


def _inert_factor(gate: GateConfig) -> str:
    return (f"gate.max_resample_factor = {gate.max_resample_factor:g} is set, but no rejection criterion is: the gate "
            "rejects nothing, so nothing is resampled and the factor does nothing; turn the gate on with "
            "gate.reject_uniform = true or gate.advantage_range = [low, high], or remove gate.max_resample_factor")


class CurriculumConfig(BaseConfig):
    """Which tasks the train stream plays more often. `difficulty_pool`: a task whose recent rollouts all passed
    (easy) or all failed (hard) is drawn with a lower weight."""

    sampler: Literal["uniform", "difficulty_pool"] = Field(
        "uniform",
        description="uniform = every task alike; difficulty_pool = the fields below apply (set while sampler is unset "
        "they are refused; with sampler = \"uniform\" set, warned about).",
    )
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
                f"curriculum.min_rollouts ({self.min_rollouts}) is above curriculum.window ({self.window}): a task "
                f"would never hold min_rollouts rollouts in its window of the last {self.window}, so none would count "
                f"as easy or hard; lower curriculum.min_rollouts to {self.window} or less, or raise curriculum.window "
                f"to {self.min_rollouts} or more"
            )
        return self

    @model_validator(mode="after")
    def _pool_fields_need_the_pool(self) -> CurriculumConfig:
        """Difficulty-pool fields set while `sampler` never was: refused (they tune the pool only). `sampler =
        "uniform"` set explicitly (a layered config turning a base's pool off) is only warned about
        (`inert_recipe_settings`)."""
        named = [f for f in POOL_FIELDS if f in self.model_fields_set]
        if named and self.sampler != "difficulty_pool" and "sampler" not in self.model_fields_set:
            raise ValueError(_inert_pool(self, named))
        return self


    @model_validator(mode="after")
    def _pool_changes_a_weight(self) -> CurriculumConfig:
        """The difficulty pool with `easy_weight = hard_weight = 1` draws every task with weight 1, as `uniform`
        does: refused (the curriculum would change nothing)."""
        if self.sampler == "difficulty_pool" and self.easy_weight == 1 and self.hard_weight == 1:
            raise ValueError(
                "`curriculum.sampler = \"difficulty_pool\"` with `curriculum.easy_weight = 1` and "
                "`curriculum.hard_weight = 1` draws every task with weight 1 (easy, hard and mixed alike), as "
                "sampler = \"uniform\" does, so the curriculum changes nothing; lower easy_weight or hard_weight "
                "below 1 (the default is 0.1), or remove the curriculum"
            )
        return self


POOL_FIELDS = ("window", "min_rollouts", "easy_weight", "hard_weight", "pass_threshold")
"""The `[orchestrator.curriculum]` fields that only the difficulty pool reads."""


def _inert_pool(cur: CurriculumConfig, named: list[str]) -> str:
    fields = ", ".join(f"curriculum.{f}" for f in named)
    return (f"{fields} {'is' if len(named) == 1 else 'are'} set, but curriculum.sampler = {cur.sampler!r}: "
            f"{'it tunes' if len(named) == 1 else 'they tune'} the difficulty pool only, so every task is drawn alike "
            f"and {'it does' if len(named) == 1 else 'they do'} nothing; set curriculum.sampler = "
            f"\"difficulty_pool\", or remove {'it' if len(named) == 1 else 'them'}")


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
                f"length_penalty.cache_tokens ({self.cache_tokens}) is above length_penalty.max_tokens "
                f"({self.max_tokens}): the linear zone lies below max_tokens; lower cache_tokens to at most "
                f"{self.max_tokens}, or raise max_tokens"
            )
        return self


def _max_turns(source: Any) -> int | None:
    """The most model turns a rollout of train source `source` plays (`env.agent.max_turns`); None when its
    environment has no agent loop settings."""
    agent = getattr(source.env, "agent", None)
    return getattr(agent, "max_turns", None)


def token_batch_problem(orch: Any) -> str | None:
    """None unless the orchestrator config `orch` sets a `token_batch_size` that can never cut a step; else the
    refusal, naming the fields and the fix.

    A step is cut at `batch_size` rollouts (`Scheduler._step_full`), so `token_batch_size` acts only while the step
    holds fewer: at most the largest sum of group sizes below `batch_size` (`most_rollouts_before_the_cut`;
    `batch_size - group_size` with one group size). A rollout holds one sample per prefix break, at most `env.agent.max_turns` samples of at most `seq_len` tokens
    each; `token_batch_size` above that product can never be reached first."""
    tbs = orch.token_batch_size
    turns = [_max_turns(s) for s in orch.train.source]
    if tbs is None or None in turns:
        return None
    sizes = orch.train.group_sizes
    before = most_rollouts_before_the_cut(orch.batch_size, sizes)
    per_rollout = orch.seq_len * max(turns)
    most = before * per_rollout
    if tbs <= most:
        return None
    head = f"`token_batch_size = {tbs}` can never cut a step: a step is cut at `batch_size = {orch.batch_size}` rollouts"
    if before <= 0:
        return (f"{head}, and that is one group of {sizes[0]}, so every step is exactly one group; remove "
                "token_batch_size, or raise batch_size to several groups")
    each = (f"seq_len = {orch.seq_len} tokens each" if max(turns) == 1 else f"seq_len x env.agent.max_turns = "
            f"{orch.seq_len} x {max(turns)} = {per_rollout} tokens each (one sample per prefix break)")
    return (f"{head}, and before that it holds at most {before} rollouts of at most {each}, {most} tokens in all; "
            f"lower token_batch_size to at most {most}, or remove it")


def most_rollouts_before_the_cut(batch_size: int, sizes: list[int]) -> int:
    """The most rollouts a step of groups of `sizes` (any number of each, in any mix) holds while still below
    `batch_size`: the largest sum of group sizes under `batch_size` (0 when the one size is `batch_size`). E.g. sizes [2, 4]
    and batch_size 6 give 4 (2 + 2 or 4), not 5."""
    reachable = [True] + [False] * (batch_size - 1)
    for total in range(1, batch_size):
        reachable[total] = any(size <= total and reachable[total - size] for size in set(sizes))
    return max(total for total in range(batch_size) if reachable[total])


def length_penalty_problem(orch: Any) -> str | None:
    """None unless a train source of the orchestrator config `orch` has a `length_penalty` that can never apply;
    else the refusal, naming the fields and the fix.

    The penalty is nonzero only past the soft budget `max_tokens - cache_tokens` of sampled tokens
    (`orchestrator.gates.length_penalty`); a rollout samples at most `env.agent.max_turns` turns of at most
    `max_completion_tokens` (the source's sampling, else `train.sampling`) and `seq_len - 1` tokens each."""
    for i, src in enumerate(orch.train.source):
        pen, turns = src.length_penalty, _max_turns(src)
        if pen is None or turns is None:
            continue
        mct = (src.sampling or orch.train.sampling).max_completion_tokens
        per_turn = min(mct, orch.seq_len - 1)
        most, soft = turns * per_turn, pen.max_tokens - pen.cache_tokens
        if most > soft:
            continue
        cap = f"max_completion_tokens ({mct})" if per_turn == mct else f"seq_len - 1 ({per_turn})"
        return (f"train.source.{i}.length_penalty (source {src.name!r}) never applies: it is 0 up to max_tokens - "
                f"cache_tokens = {pen.max_tokens} - {pen.cache_tokens} = {soft} sampled tokens, and a rollout of "
                f"this source samples at most env.agent.max_turns ({turns}) x {cap} = {most}; lower "
                f"length_penalty.max_tokens below {most + pen.cache_tokens} (the full penalty at max_tokens), or "
                "remove length_penalty")
    return None


SIGNAL_DECIDED_BY_RL: ContextVar[bool] = ContextVar("prime_rl_signal_decided_by_rl", default=False)
"""True while an `rl` config validates its sections (`config.rl.RLConfig`): whether the loss has a term beyond the
advantage (a teacher, a reference KL) is known only from the whole config, so `lone_group_problem` runs there."""


def lone_group_problem(orch: Any, signal: bool, prefix: str = "", fix: str = "") -> str | None:
    """None unless a train source of the orchestrator config `orch` plays groups of one rollout with a built-in
    advantage estimator while the loss has no term beyond the advantage (`signal` false: no teacher, no reference
    KL); else the refusal, naming the source, the field (under `prefix`) and the fix (`fix`: how to add a teacher
    or a KL term in this command).

    GRPO, RLOO and MaxRL give every member of a group of one advantage 0 (`orchestrator.advantages`): such groups
    never train, and a run of them only ends at `max_empty_steps`. A custom estimator may use another baseline."""
    if signal:
        return None
    train = orch.train
    for i, src in enumerate(train.source):
        adv = src.advantage or orch.advantage
        if train.group_size_of(src) != 1 or adv.type == "custom":
            continue
        field = f"train.source.{i}.group_size" if src.group_size is not None else "train.group_size"
        return (f"`{prefix}{field} = 1` (source {src.name!r}): a group of one rollout has advantage 0 under the "
                f"{adv.type!r} estimator (its reward minus the mean of a group of one), so this source's rollouts "
                f"never train and a run of such groups only stops at max_empty_steps; set {prefix}{field} >= 2, "
                f"or train on a signal beyond the advantage: {fix or 'a teacher or a reference-KL term'}")
    return None


def gate_beside_kl_problem(orch: Any, term: str) -> str | None:
    """None unless the gate's `reject_uniform` of the orchestrator config `orch` can never reject a group because
    `keep_for_kl` admits it first; else the refusal, naming the fields (backticked: the error names where they were
    set), the loss term `term` that made `rl` set keep_for_kl, and the fix.

    With `keep_for_kl` a group whose advantages are all 0 passes before any criterion is tested
    (`orchestrator.gates.make_gate`); equal rewards give every built-in estimator (grpo, rloo, maxrl) advantages of
    0, so `reject_uniform` rejects nothing (a custom estimator on any train source may not: then None).
    `max_resample_factor` is named too when no `advantage_range` is set, since the gate then resamples nothing;
    `advantage_range` still rejects groups with a nonzero advantage beside keep_for_kl."""
    gate = orch.gate
    if not (gate.keep_for_kl and gate.reject_uniform):
        return None
    if any((src.advantage or orch.advantage).type == "custom" for src in orch.train.source) or (
            orch.advantage.type == "custom"):  # fmt: skip
        return None
    factor = ("max_resample_factor" in gate.model_fields_set and gate.advantage_range is None)
    named = "`orchestrator.gate.reject_uniform = true`" + (
        f", and with it `orchestrator.gate.max_resample_factor = {gate.max_resample_factor:g}`," if factor else "")
    return (f"{named} can never reject a group: {term} puts a reference-KL or teacher term in the loss, so rl sets "
            "orchestrator.gate.keep_for_kl = true, which admits a group whose advantages are all 0 (its KL term "
            "still trains) before reject_uniform is tested, and a group whose rewards are all equal has advantages "
            "all 0; remove orchestrator.gate.reject_uniform" + (" and max_resample_factor" if factor else "") +
            " (gate.advantage_range = [low, high] still rejects groups with a nonzero advantage), or set the loss "
            "term to 0 to let the gate reject uniform groups")


def filter_zero_beside_gate_problem(orch: Any) -> str | None:
    """None unless a train source's `filter_zero` (its own `advantage`, else `orchestrator.advantage`) can never act
    because the gate's `reject_uniform` is on in the orchestrator config `orch`; else the refusal, naming the fields
    (backticked: the error names where they were set) and the fix.

    Under a built-in estimator (grpo, rloo, maxrl) a group's advantages are all 0 only when its unmasked rewards
    are all equal, and the gate rejects exactly those groups and samples replacements; the rejected groups that fill
    a step once the refill budget is spent are out of the loss already. With `keep_for_kl` (the gate admits such
    groups for a KL or teacher term) or a custom estimator, filter_zero may act: None."""
    gate = orch.gate
    if not gate.reject_uniform or gate.keep_for_kl:
        return None
    for i, src in enumerate(orch.train.source):
        adv = src.advantage or orch.advantage
        if not adv.filter_zero or adv.type == "custom":
            continue
        own = src.advantage is not None and not orch.advantage.filter_zero  # a merged global value: name the global
        field = f"train.source.{i}.advantage.filter_zero" if own else "advantage.filter_zero"
        return (f"`{field} = true` can never act beside `gate.reject_uniform = true`: under the {adv.type!r} "
                "estimator a group's advantages are all 0 only when its rewards are all equal, the gate rejects "
                "every such group and samples a replacement, and the rejected groups that fill a step once the "
                f"refill budget is spent are out of the loss already; remove {field} (the gate replaces it), or set "
                "gate.reject_uniform = false to drop such groups without refill")
    return None


def recipe_problem(orch: Any) -> str | None:
    """The first refusal of `token_batch_problem`, `length_penalty_problem` and `filter_zero_beside_gate_problem`
    for the orchestrator config `orch`, or None."""
    return token_batch_problem(orch) or length_penalty_problem(orch) or filter_zero_beside_gate_problem(orch)


def inert_recipe_settings(orch: Any, where: Callable[[str], str] | None = None) -> list[tuple[list[str], str]]:
    """Recipe settings of the orchestrator config `orch` that take no effect because their switch is set off, e.g.
    by a layered config turning a base's gate or curriculum off (a setting whose switch was never set is refused
    when the config is read): `(fields, message)` pairs, the fields dotted under the orchestrator. `rl` prints them
    as warnings (console and dry run); the orchestrator logs them at start.

    `where(field)` says where the command line set the dotted orchestrator field (` (in FILE)`, ` (from --flag)`,
    "" for a default; `config.origin.where_set`). A setting is reported when a layer other than the one that set
    its switch off set it, whatever its value (the default too: it was meant to act), or when it differs from its
    default; a setting given at its default in the same place as the switch (a resolved config, which holds every
    field, or a config built in code: `where` None) is not."""
    where = where or (lambda field: "")

    def inert(section: str, field: str, default: Any, switches: tuple[str, ...]) -> bool:
        value, here = getattr(getattr(orch, section), field), where(f"{section}.{field}")
        return value != default or bool(here) and here not in {where(f"{section}.{s}") for s in switches}

    out = []
    gate, cur = orch.gate, orch.curriculum
    factor = GateConfig.model_fields["max_resample_factor"].default
    if not gate.enabled and inert("gate", "max_resample_factor", factor, ("reject_uniform", "advantage_range")):
        out.append((["gate.max_resample_factor"], _inert_factor(gate)))
    named = [f for f in POOL_FIELDS if inert("curriculum", f, CurriculumConfig.model_fields[f].default, ("sampler",))]
    if cur.sampler != "difficulty_pool" and named:
        out.append(([f"curriculum.{f}" for f in named], _inert_pool(cur, named)))
    return out
