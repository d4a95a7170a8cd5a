"""The signal gate and its refill, the length penalty and token_batch_size: hand-worked values."""

from __future__ import annotations

import asyncio
import re

import pytest
from tests.orchestrator.fakes import EchoEnv, ScriptedClient, tiny_tokenizer

from prime_rl.config.orchestrator import GRPOAdvantageConfig, OrchestratorConfig, RendererConfig
from prime_rl.config.recipes import GateConfig, LengthPenaltyConfig
from prime_rl.envs.base import Task
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.admission import admit
from prime_rl.orchestrator.gates import length_penalty, make_gate, resample_budget
from prime_rl.orchestrator.scheduler import Scheduler
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.types import PolicyVersion, Rollout, Sample

TASK = Task("t0", "train", 0, [{"role": "user", "content": "x"}])


def _rollout(reward: float, sampled: int = 1, prompt: int = 0, source: str = "s", gid: int = 0, adv: float = 0.0):
    s = Sample([1] * (prompt + sampled), [False] * prompt + [True] * sampled, [0.0] * (prompt + sampled))
    return Rollout(task=TASK, source=source, group_id=gid, samples=[s], reward=reward, advantage=adv)


# ---- the gate as a filter ----
def test_gate_rejects_uniform_rewards_and_out_of_range_advantages():
    adv = GRPOAdvantageConfig()
    uniform = make_gate(GateConfig(reject_uniform=True))
    assert uniform([_rollout(1.0), _rollout(1.0)], adv) == "gate: every reward is 1"
    assert uniform([_rollout(0.0, adv=-0.5), _rollout(1.0, adv=0.5)], adv) is None
    masked = _rollout(1.0)
    masked.mask("env/x", "boom")
    assert uniform([masked, _rollout(0.0)], adv) == "gate: every reward is 0"  # the masked reward does not count
    ranged = make_gate(GateConfig(advantage_range=(0.1, 0.4)))
    assert ranged([_rollout(0.0, adv=-0.5), _rollout(1.0, adv=0.5)], adv).startswith("gate: max |advantage| 0.5")
    assert ranged([_rollout(0.0, adv=-0.25), _rollout(0.5, adv=0.25)], adv) is None
    assert ranged([_rollout(1.0), _rollout(1.0)], adv).startswith("gate: max |advantage| 0 outside")
    # a reference-KL term still trains on zero-advantage groups: kept
    kl = make_gate(GateConfig(reject_uniform=True, advantage_range=(0.1, 0.4), keep_for_kl=True))
    assert kl([_rollout(1.0), _rollout(1.0)], adv) is None
    assert kl([_rollout(0.0, adv=-0.5), _rollout(1.0, adv=0.5)], adv) is not None


def test_resample_budget_is_the_ceiling_of_factor_times_batch_rollouts():
    assert resample_budget(GateConfig(reject_uniform=True, max_resample_factor=2.0), 4) == 8  # 4 groups of 2
    assert resample_budget(GateConfig(reject_uniform=True, max_resample_factor=1.5), 3) == 5  # ceil(4.5)
    assert resample_budget(GateConfig(reject_uniform=True, max_resample_factor=1.0), 4) == 4


def test_gate_config_refuses_a_bad_range():
    with pytest.raises(ValueError, match="advantage_range"):
        GateConfig(advantage_range=(0.5, 0.1))


# ---- the length penalty ----
def test_length_penalty_at_hand_computed_lengths():
    cfg = LengthPenaltyConfig(max_tokens=20, cache_tokens=8, coef=1.0)  # soft budget 12
    assert [length_penalty(n, cfg) for n in (0, 10, 12, 14, 16, 20, 30)] == [0.0, 0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    assert length_penalty(16, LengthPenaltyConfig(max_tokens=20, cache_tokens=8, coef=0.5)) == -0.25
    with pytest.raises(ValueError, match="cache_tokens"):
        LengthPenaltyConfig(max_tokens=4, cache_tokens=8)


def test_admit_applies_the_penalty_of_the_rollouts_source_before_advantages():
    # rewards 1, 1; sampled 10 and 16 tokens -> penalties 0, -0.5 -> rewards 1, 0.5; GRPO mean 0.75 -> +0.25, -0.25
    group = [_rollout(1.0, sampled=10, prompt=3, source="a"), _rollout(1.0, sampled=16, prompt=3, source="a")]
    other = [_rollout(1.0, sampled=16, source="b", gid=1), _rollout(0.0, sampled=16, source="b", gid=1)]
    pen = {"a": LengthPenaltyConfig(max_tokens=20, cache_tokens=8)}
    b = admit([group, other], GRPOAdvantageConfig(), step=1, penalties=pen)
    assert [r.reward for r in b.rollouts] == [1.0, 0.5, 1.0, 0.0]
    assert [r.advantage for r in b.rollouts] == [0.25, -0.25, 0.5, -0.5]
    assert [r.env_metrics.get("length_penalty") for r in b.rollouts] == [0.0, -0.5, None, None]
    assert [r.reward for r in group] == [1.0, 1.0]  # the scheduler's rollouts are not written


# ---- refill in the scheduler ----
class GidClient(ScriptedClient):
    """Answers by group: `answer(gid, k)` for rollout k of group gid (EchoEnv's reward = the digit / 3); a rollout of
    group gid waits 1 ms * (gid % 3) before it is sampled, or with `delay_s` given, `delay_s[gid]` seconds (default 0)
    after it is sampled (its tokens keep the policy version that sampled them, as a slow environment turn does)."""

    def __init__(self, tok, answer, delay_s=None):
        super().__init__(tok, lambda p, i: "")
        self.answer, self.group_delay_s = answer, delay_s
        self.gids: list[int] = []

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        gid, k = int(rollout_id.split("/g")[1].split("/")[0]), int(rollout_id.rsplit("/r", 1)[1])
        self.gids.append(gid)
        if self.group_delay_s is None:
            await asyncio.sleep(0.001 * (gid % 3))
        self.script = lambda p, i: self.answer(gid, k)
        out = await super().generate(prompt_ids, sampling, rollout_id=rollout_id, stop_token_ids=stop_token_ids,
                                     max_tokens=max_tokens)  # fmt: skip
        await asyncio.sleep((self.group_delay_s or {}).get(gid, 0.0))
        return out


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    return make_renderer(tiny_tokenizer(tmp_path_factory.mktemp("tok")), RendererConfig())


def alternate(gid: int, k: int) -> str:
    """Even groups: every rollout says r0 (all rewards 0); odd groups: r0, r3, ... (rewards 0 and 1)."""
    return "r0" if gid % 2 == 0 else f"r{3 * (k % 2)}"


async def _steps(renderer, answer, steps, *, async_level=0, check_bound=False, delay_s=None, **cfg_kw):
    src = InProcessSource("echo", EchoEnv(64))
    client = GidClient(renderer._tokenizer, answer, delay_s)
    policy = PolicyVersion(0)
    cfg = OrchestratorConfig(**{
        "batch_size": 4, "train": {"group_size": 2, "sampling": {"max_completion_tokens": 8}}, "seq_len": 512,
        "concurrency": {"max_inflight": 64}, "max_async_level": async_level, "weights_timeout_s": 30, **cfg_kw,
    })  # fmt: skip
    sched = Scheduler(cfg, sources=[src], stream=TaskStream([src], seed=0), client=client, renderer=renderer,
                      policy=policy)  # fmt: skip
    bound_seen = []
    if check_bound:
        launch = sched._launch

        def checked(step):
            launch(step)
            bound_seen.append((sched.outstanding_rollouts, sched._allowed_rollouts(step)))

        sched._launch = checked
    batches = []
    for step in range(1, steps + 1):
        batches.append(await sched.next_batch(step))
        lag = step - async_level  # the trainer publishes step N - async_level's weights as step N is cut
        if lag > policy.version:
            client.version = lag
            policy.set(lag)
    await sched.aclose()
    return batches, client, sched, bound_seen


async def test_refill_replaces_every_rejected_group_with_exact_counts(renderer):
    batches, client, sched, _ = await _steps(renderer, alternate, 2, gate={"reject_uniform": True})
    # step 1: g0 (all 0) rejected, g1 passes, g2 rejected, g3 passes -> 4 groups sampled, 2 rejected
    # step 2: g4 rejected, g5 passes, g6 rejected, g7 passes
    assert sorted(set(client.gids)) == list(range(8))
    for step, b in enumerate(batches, start=1):
        gids = sorted({r.group_id for r in b.rollouts})
        assert gids == [4 * step - 3, 4 * step - 1]
        assert len(b.rollouts) == 4 and all(r.trainable for r in b.rollouts)
        assert (b.gate_rejected_groups, b.gate_extra_rollouts, b.gate_budget_spent, b.filtered_groups) == (
            2,
            4,
            False,
            0,
        )
    assert sched.recipe_metrics(batches[1]) == {"gate/rejected_groups": 2, "gate/extra_rollouts": 4,
                                                "gate/budget_spent": 0, "gate/rejected_total": 4}  # fmt: skip


async def test_spent_budget_trains_what_it_has_and_fills_with_rejected_groups(renderer, caplog):
    # every group all-0: budget ceil(1.5 * 2) = 3 groups examined, then the step is cut with 2 of them, filtered
    batches, client, _, _ = await _steps(renderer, lambda g, k: "r0", 1,
                                         gate={"reject_uniform": True, "max_resample_factor": 1.5})  # fmt: skip
    b = batches[0]
    assert sorted({r.group_id for r in b.rollouts}) == [0, 1] and len(b.rollouts) == 4
    assert all(r.filtered for r in b.rollouts) and b.filtered_groups == 2
    assert (b.gate_rejected_groups, b.gate_extra_rollouts, b.gate_budget_spent) == (3, 2, True)
    assert "gate refill budget spent (3 groups examined, max_resample_factor=1.5)" in caplog.text
    # factor 1: no extra sampling; alternating groups -> g1 passes, g0 fills the batch out of the loss
    batches, *_ = await _steps(renderer, alternate, 1, gate={"reject_uniform": True, "max_resample_factor": 1.0})
    b = batches[0]
    assert [(r.group_id, r.filtered) for r in b.rollouts] == [(0, True), (0, True), (1, False), (1, False)]
    assert (b.gate_rejected_groups, b.gate_extra_rollouts, b.gate_budget_spent) == (1, 0, True)


async def test_refill_keeps_the_staleness_bound(renderer):
    for level in (0, 1, 2):
        batches, _, _, seen = await _steps(renderer, alternate, 5, async_level=level, check_bound=True,
                                           gate={"reject_uniform": True, "max_resample_factor": 3.0})  # fmt: skip
        assert seen and all(out <= allowed for out, allowed in seen)
        for step, b in enumerate(batches, start=1):
            assert len(b.rollouts) == 4 and b.gate_rejected_groups >= 1
            assert min(v for r in b.rollouts for v in r.policy_versions) >= step - 1 - level


async def test_a_spent_budget_keeps_max_async_level_zero_synchronous(renderer):
    # max_async_level 0, batch 4 = 2 groups of 2, max_resample_factor 1 (2 groups examined per step). Step 1: g0
    # (all 0) is rejected at once and g2 is launched to replace it (policy 0); g1 (0.1 s) passes and spends the
    # budget, so step 1 trains g1 with g0 as its filler while g2 (0.4 s) still runs. Step 2 accepts only policy 1:
    # g2 (policy 0) is dropped when examined and g3, g4 (policy 1) make the step.
    answer = lambda gid, k: "r0" if gid == 0 else f"r{3 * (k % 2)}"  # noqa: E731
    batches, _, sched, _ = await _steps(renderer, answer, 2, delay_s={1: 0.1, 2: 0.4},
                                        gate={"reject_uniform": True, "max_resample_factor": 1.0})  # fmt: skip
    assert [(r.group_id, r.filtered) for r in batches[0].rollouts] == [(0, True), (0, True), (1, False), (1, False)]
    assert batches[0].gate_budget_spent
    assert sorted({r.group_id for r in batches[1].rollouts}) == [3, 4] and sched.total_carried_dropped == 1
    for step, b in enumerate(batches, start=1):
        assert {v for r in b.rollouts for v in r.policy_versions} == {step - 1} and b.max_off_policy == 0


async def test_a_spent_budget_keeps_trained_rollouts_within_max_async_level(renderer):
    # every step with a rejected group spends its budget; whatever order the groups finish in, no rollout of a
    # step (trained or filler) is older than its bound, and the metric is the trained rollouts' off-policy steps
    for level in (0, 1, 2):
        batches, *_ = await _steps(renderer, alternate, 6, async_level=level,
                                   gate={"reject_uniform": True, "max_resample_factor": 1.0})  # fmt: skip
        assert sum(b.gate_budget_spent for b in batches) >= 3
        for step, b in enumerate(batches, start=1):
            assert len(b.rollouts) == 4
            trained = [v for r in b.rollouts if not r.filtered for v in r.policy_versions]
            assert min(v for r in b.rollouts for v in r.policy_versions) >= step - 1 - level
            assert b.max_off_policy == (step - 1 - min(trained) if trained else 0) <= level


async def test_gate_off_keeps_the_first_finished_groups(renderer):
    batches, client, sched, _ = await _steps(renderer, alternate, 1)
    assert sorted({r.group_id for r in batches[0].rollouts}) == [0, 1] and sorted(set(client.gids)) == [0, 1]
    assert sched.recipe_metrics(batches[0]) == {}


# ---- token_batch_size ----
async def test_token_batch_size_cuts_at_the_first_group_that_reaches_it(renderer):
    probe, *_ = await _steps(renderer, alternate, 1)
    per_group = {}
    for r in probe[0].rollouts:
        per_group[r.group_id] = per_group.get(r.group_id, 0) + r.num_tokens
    g0 = per_group[0]
    # a budget of g0's tokens: one group fills it
    batches, _, sched, _ = await _steps(renderer, alternate, 1, token_batch_size=g0)
    b = batches[0]
    assert len({r.group_id for r in b.rollouts}) == 1 and sum(r.num_tokens for r in b.rollouts) >= g0
    assert sched.recipe_metrics(b) == {"batch_tokens": sum(r.num_tokens for r in b.rollouts)}
    # one token more needs a second group; the largest budget accepted, (4 - 2) rollouts x seq_len 512 x max_turns 8
    # (test_token_batch_size_that_can_never_cut_a_step_is_refused), stops at batch_size rollouts
    batches, *_ = await _steps(renderer, alternate, 1, token_batch_size=g0 + 1)
    assert len({r.group_id for r in batches[0].rollouts}) == 2
    batches, *_ = await _steps(renderer, alternate, 1, token_batch_size=8192)
    assert len(batches[0].rollouts) == 4


def test_step_full_counts_prompt_and_completion_tokens():
    from prime_rl.orchestrator.scheduler import Group

    cfg = OrchestratorConfig(batch_size=6, train={"group_size": 2}, token_batch_size=30)
    sched = Scheduler.__new__(Scheduler)
    sched.batch_size, sched.token_batch_size = cfg.batch_size, cfg.token_batch_size
    g = [
        Group(i, 0, 0, 2, rollouts=[_rollout(0, sampled=5, prompt=5), _rollout(0, sampled=2, prompt=5)])
        for i in range(3)
    ]
    assert not sched._step_full(g[:1])  # 17 tokens
    assert sched._step_full(g[:2])  # 34 >= 30
    sched.token_batch_size = 100
    assert not sched._step_full(g[:2]) and sched._step_full(g)  # 51 < 100, but 3 groups of 2 = batch_size


def test_rl_keeps_zero_advantage_groups_when_the_loss_has_a_kl_term():
    from prime_rl.config.rl import RLConfig

    on = RLConfig(trainer={"loss": {"ref_kl_coef": 0.1}}, orchestrator={"gate": {"advantage_range": [0.1, 5.0]}})
    off = RLConfig(orchestrator={"gate": {"reject_uniform": True}})
    assert on.orchestrator.gate.keep_for_kl and not off.orchestrator.gate.keep_for_kl


def test_rl_refuses_reject_uniform_beside_a_kl_or_teacher_term(tmp_path):
    """keep_for_kl (set by rl from a reference-KL or teacher term) admits a group whose advantages are all 0 before
    reject_uniform is tested, and equal rewards give every built-in estimator advantages of 0: reject_uniform (and a
    max_resample_factor with no advantage_range) could never act, so rl refuses them, naming where each was set."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.rl import RLConfig

    gate = make_gate(GateConfig(reject_uniform=True, keep_for_kl=True))
    uniform = [_rollout(1.0) for _ in range(4)]
    assert gate(uniform, GRPOAdvantageConfig()) is None  # the gate admits it: reject_uniform never acts

    run = tmp_path / "rl.toml"
    run.write_text("[trainer.loss]\nref_kl_coef = 0.01\n\n[orchestrator.gate]\nreject_uniform = true\n"
                   "max_resample_factor = 2.0\n")
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run)])
    msg = str(err.value)
    assert (f"`orchestrator.gate.reject_uniform = true` (in {run}), and with it "
            f"`orchestrator.gate.max_resample_factor = 2` (in {run}), can never reject a group: "
            f"`trainer.loss.ref_kl_coef = 0.01` (in {run}) puts a reference-KL or teacher term") in msg, msg
    assert "remove orchestrator.gate.reject_uniform and max_resample_factor" in msg
    with pytest.raises(ValueError, match=r"`trainer.loss.type = 'opd'` puts a reference-KL or teacher term"):
        RLConfig(trainer={"loss": {"type": "opd"}}, teacher={"model": {"name": "t"}},
                 orchestrator={"gate": {"reject_uniform": True}})  # fmt: skip
    # advantage_range still acts beside keep_for_kl (nonzero advantages outside the range): reject_uniform alone
    # is refused, without naming the factor
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run), "--orchestrator.gate.advantage-range", "[0.1, 5]"])
    assert "max_resample_factor" not in str(err.value).split("can never")[0]
    kept = parse_config(RLConfig, ["--trainer.loss.ref-kl-coef", "0.01", "--orchestrator.gate.advantage-range",
                                   "[0.1, 5]", "--orchestrator.gate.max-resample-factor", "2"])  # fmt: skip
    assert kept.orchestrator.gate.keep_for_kl and kept.orchestrator.gate.advantage_range == (0.1, 5.0)
    # a custom estimator may give equal rewards nonzero advantages: reject_uniform may act, accepted
    custom = RLConfig(trainer={"loss": {"ref_kl_coef": 0.1}}, orchestrator={
        "gate": {"reject_uniform": True}, "advantage": {"type": "custom", "import_path": "m:f"}})
    assert custom.orchestrator.gate.reject_uniform


def test_rl_refuses_a_keep_for_kl_set_against_the_loss(tmp_path):
    """Under rl the loss decides keep_for_kl: `false` beside a reference-KL or teacher term (rl would admit the
    groups anyway) and `true` without one (the admitted groups would train nothing) are refused, naming the field,
    where it and the loss term were set, and the fix; a value that agrees with the loss is accepted."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.rl import RLConfig

    run = tmp_path / "rl.toml"
    run.write_text("[orchestrator.gate]\nreject_uniform = true\nkeep_for_kl = false\n")
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run), "--trainer.loss.ref-kl-coef", "0.1"])
    assert (f"`orchestrator.gate.keep_for_kl = false` (in {run}), but `trainer.loss.ref_kl_coef = 0.1` (from "
            "--trainer.loss.ref-kl-coef) puts a reference-KL or teacher term in the loss") in str(err.value)
    assert "remove orchestrator.gate.keep_for_kl" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["--orchestrator.gate.keep-for-kl", "true"])
    assert ("`orchestrator.gate.keep_for_kl = true` (from --orchestrator.gate.keep-for-kl) admits groups whose "
            "advantages are all 0") in str(err.value)
    assert "but trainer.loss has neither" in str(err.value)
    with pytest.raises(ValueError, match=r"`trainer.loss.type = 'opd'` puts a reference-KL or teacher term"):
        RLConfig(trainer={"loss": {"type": "opd"}}, teacher={"model": {"name": "t"}},
                 orchestrator={"gate": {"keep_for_kl": False}})  # fmt: skip
    agrees = parse_config(RLConfig, ["--orchestrator.gate.keep-for-kl", "true", "--trainer.loss.ref-kl-coef", "0.1"])
    assert agrees.orchestrator.gate.keep_for_kl
    # the resolved config rl writes (keep_for_kl = true beside the term) reads back
    assert RLConfig.model_validate(agrees.model_dump()).orchestrator.gate.keep_for_kl


def test_eval_sources_refuse_a_length_penalty():
    from prime_rl.config.orchestrator import EvalConfig

    with pytest.raises(ValueError, match=r"`source.0.length_penalty = \{...\}` is a train-source setting: eval reports"):
        EvalConfig(source=[{"env": {"id": "digit-bandit"}, "length_penalty": {"max_tokens": 8, "cache_tokens": 4}}])


# ---- per-source sampling ----
async def test_a_source_with_its_own_sampling_samples_with_it(renderer):
    from prime_rl.config.orchestrator import TrainSamplingConfig

    a, b = InProcessSource("a", EchoEnv(8)), InProcessSource("b", EchoEnv(8))
    client = GidClient(renderer._tokenizer, lambda g, k: "r1 r1 r1 r1 r1 r1 r1 r1")
    cfg = OrchestratorConfig(
        batch_size=8, seq_len=512, max_async_level=0, weights_timeout_s=30,
        train={"group_size": 2, "sampling": {"max_completion_tokens": 32}, "source": [
            {"name": "a", "env": {"id": "digit-bandit"}},
            {"name": "b", "env": {"id": "digit-bandit"}, "sampling": {"temperature": 0.5, "max_completion_tokens": 2}},
        ]},
    )  # fmt: skip
    sched = Scheduler(cfg, sources=[a, b], stream=TaskStream([a, b], seed=1), client=client, renderer=renderer,
                      policy=PolicyVersion(0))  # fmt: skip
    batch = await sched.next_batch(1)
    await sched.aclose()
    by = {s: [r for r in batch.rollouts if r.source == s] for s in ("a", "b")}
    assert by["a"] and by["b"]
    assert all(r.temperature == 1.0 and r.num_loss_tokens > 2 and not r.truncated for r in by["a"])
    assert all(r.temperature == 0.5 and r.num_loss_tokens == 2 and r.truncated for r in by["b"])
    with pytest.raises(ValueError, match=r"train.source.0.sampling.top_p = 0.5"):
        TrainSamplingConfig(source=[{"env": {"id": "digit-bandit"}, "sampling": {"top_p": 0.5}}])
    from prime_rl.config.orchestrator import EvalConfig

    # an eval source's own sampling applies (the fields it sets, over eval.sampling): tests/orchestrator/test_per_source.py
    ev = EvalConfig(sampling={"max_completion_tokens": 40}, source=[{"env": {"id": "digit-bandit"}, "sampling": {"temperature": 0.5}}])
    assert (ev.source[0].sampling.temperature, ev.source[0].sampling.max_completion_tokens) == (0.5, 40)


def test_admit_uses_the_advantage_settings_of_the_groups_source():
    from prime_rl.config.orchestrator import RLOOAdvantageConfig

    a = [_rollout(1.0, source="a"), _rollout(0.0, source="a"), _rollout(0.0, source="a")]
    b = [_rollout(1.0, source="b", gid=1), _rollout(0.0, source="b", gid=1), _rollout(0.0, source="b", gid=1)]
    flat_a = [_rollout(1.0, source="a", gid=2), _rollout(1.0, source="a", gid=2)]
    flat_b = [_rollout(1.0, source="b", gid=3), _rollout(1.0, source="b", gid=3)]
    per = {"a": RLOOAdvantageConfig(filter_zero=True)}
    out = admit([a, b, flat_a, flat_b], GRPOAdvantageConfig(), step=1, per_source=per)
    adv = [r.advantage for r in out.rollouts]
    # a, RLOO: r_i - mean of the others = 1 - 0, 0 - 1/2, 0 - 1/2; b, GRPO: r_i - 1/3
    assert adv[:3] == [1.0, -0.5, -0.5]
    assert adv[3:6] == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-12)
    assert [r.filtered for r in out.rollouts[6:]] == [True, True, False, False]  # filter_zero is a's only
    assert out.filtered_groups == 1


def test_eval_sources_refuse_an_advantage():
    from prime_rl.config.orchestrator import EvalConfig

    with pytest.raises(ValueError, match=r"`source.0.advantage = \{...\}` is a train-source setting"):
        EvalConfig(source=[{"env": {"id": "digit-bandit"}, "advantage": {"type": "rloo"}}])


# ---- settings that could never act ----
def test_resample_factor_without_a_criterion_is_refused_or_warned(tmp_path):
    """`max_resample_factor` alone turns nothing on: refused when no criterion was ever set (naming the field, where
    it was set and the fix), warned about when a criterion is set off (a layered config turning a base's gate off)."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.recipes import inert_recipe_settings

    with pytest.raises(ValueError, match=r"gate.max_resample_factor = 3 is set, but no rejection criterion is.*"
                                         r"gate.reject_uniform = true or gate.advantage_range"):
        GateConfig(max_resample_factor=3.0)
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[gate]\nmax_resample_factor = 3.0\n")
    with pytest.raises(ConfigError, match=rf"no rejection criterion.*\(gate.max_resample_factor in {cfg}\)"):
        parse_config(OrchestratorConfig, ["@", str(cfg)])
    assert resample_budget(GateConfig(reject_uniform=True, max_resample_factor=3.0), 4) == 12
    assert GateConfig(advantage_range=(0.1, 1.0), max_resample_factor=3.0).enabled
    off = OrchestratorConfig(gate={"reject_uniform": False, "max_resample_factor": 3.0})
    assert [fields for fields, _ in inert_recipe_settings(off)] == [["gate.max_resample_factor"]]
    default_factor = OrchestratorConfig(gate={"reject_uniform": False, "max_resample_factor": 2.0})
    assert inert_recipe_settings(default_factor) == []  # the default changes nothing either way


def _orch(**kw):
    return OrchestratorConfig(**{"batch_size": 4, "seq_len": 512, "train": {"group_size": 2}, **kw})


def test_token_batch_size_that_can_never_cut_a_step_is_refused():
    """A step is cut at batch_size rollouts; before that it holds at most batch_size - group_size rollouts (one size;
    the largest sum of group sizes below batch_size with several) of at most max_turns samples of seq_len tokens: a
    larger token_batch_size is refused, naming the bound."""
    from prime_rl.config.recipes import most_rollouts_before_the_cut

    # the default source (gridsim, max_turns 8): (4 - 2) x 512 x 8 = 8192
    assert _orch(token_batch_size=8192).token_batch_size == 8192
    with pytest.raises(ValueError, match=r"`token_batch_size = 8193` can never cut a step: a step is cut at "
                                         r"`batch_size = 4` rollouts.*at most 2 rollouts.*= 4096 tokens each.*"
                                         r"8192 tokens in all; lower token_batch_size to at most 8192, or remove it"):
        _orch(token_batch_size=8193)
    one_turn = [{"name": "d", "env": {"id": "digit-bandit", "agent": {"max_turns": 1}}}]
    _orch(token_batch_size=1024, train={"group_size": 2, "source": one_turn})  # (4 - 2) x 512
    with pytest.raises(ValueError, match=r"at most 2 rollouts of at most seq_len = 512 tokens each, 1024 tokens"):
        _orch(token_batch_size=1025, train={"group_size": 2, "source": one_turn})
    # several group sizes (2 and 4), batch_size 6: a step below 6 rollouts holds 2, 4 (2 + 2 or one 4), never 5,
    # so up to 4 rollouts before the cut, x 512 x 1 (batch_size - 1 = 5 let 2049..2560 through)
    assert most_rollouts_before_the_cut(6, [2, 4]) == 4
    assert most_rollouts_before_the_cut(16, [4, 8]) == 12 and most_rollouts_before_the_cut(8, [3, 4]) == 7
    assert most_rollouts_before_the_cut(4, [4]) == 0 and most_rollouts_before_the_cut(8, [4]) == 4
    mixed = [{**one_turn[0], "name": "a"}, {**one_turn[0], "name": "b", "group_size": 4}]
    _orch(batch_size=6, token_batch_size=2048, train={"group_size": 2, "source": mixed})
    with pytest.raises(ValueError, match="at most 4 rollouts of at most seq_len = 512 tokens each, 2048 tokens"):
        _orch(batch_size=6, token_batch_size=2049, train={"group_size": 2, "source": mixed})

    with pytest.raises(ValueError, match="one group of 2, so every step is exactly one group"):
        _orch(batch_size=2, token_batch_size=10)


def test_length_penalty_that_can_never_apply_is_refused():
    """The penalty is 0 up to max_tokens - cache_tokens sampled tokens; a rollout samples at most max_turns x
    min(max_completion_tokens, seq_len - 1): a soft budget at or above that is refused, naming both."""
    def src(pen, turns=2, **kw):
        return {"name": "d", "env": {"id": "digit-bandit", "agent": {"max_turns": turns}}, "length_penalty": pen, **kw}

    train = {"group_size": 2, "sampling": {"max_completion_tokens": 8}}
    # 2 turns x 8 = 16 sampled tokens at most
    with pytest.raises(ValueError, match=r"train.source.0.length_penalty \(source 'd'\) never applies: it is 0 up to "
                                         r"max_tokens - cache_tokens = 24 - 8 = 16 sampled tokens.*at most "
                                         r"env.agent.max_turns \(2\) x max_completion_tokens \(8\) = 16; lower "
                                         r"length_penalty.max_tokens below 24"):
        _orch(train={**train, "source": [src({"max_tokens": 24, "cache_tokens": 8})]})
    _orch(train={**train, "source": [src({"max_tokens": 23, "cache_tokens": 8})]})  # 16 > 15: the last token counts
    # the source's own max_completion_tokens (100): 2 x 100 = 200
    _orch(train={**train, "source": [src({"max_tokens": 24, "cache_tokens": 8}, sampling={"max_completion_tokens": 100})]})
    # seq_len caps a turn: 1 turn x (seq_len 64 - 1) = 63
    with pytest.raises(ValueError, match=r"env.agent.max_turns \(1\) x seq_len - 1 \(63\) = 63"):
        _orch(seq_len=64, train={"group_size": 2, "source": [src({"max_tokens": 100, "cache_tokens": 37}, turns=1)]})
    _orch(seq_len=64, train={"group_size": 2, "source": [src({"max_tokens": 100, "cache_tokens": 38}, turns=1)]})


def test_orchestrator_logs_settings_switched_off_at_start(tmp_path, caplog):
    """The orchestrator says in its log what `rl` warns about: a gate factor whose criterion is set off, before it
    loads anything (here the model load fails right after)."""
    from prime_rl.orchestrator.main import _main

    cfg = OrchestratorConfig(model={"name": str(tmp_path / "no-model")}, output_dir=tmp_path,
                             gate={"reject_uniform": False, "max_resample_factor": 3.0})  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017 - no model there; the warning comes first
        asyncio.run(_main(cfg))
    # the field, where the command line this process parsed last set it (none here, or another test's), the message
    assert re.search(r"gate.max_resample_factor( \(.*\))?: gate.max_resample_factor = 3 is set, but no rejection "
                     "criterion", caplog.text)  # fmt: skip


def test_filter_zero_beside_reject_uniform_is_refused(tmp_path):
    """Under a built-in estimator only equal rewards give a group advantages of all 0, and reject_uniform rejects and
    replaces exactly those groups: filter_zero (global or a source's own) could never act, so it is refused naming
    where both were set; with keep_for_kl (a standalone orchestrator's KL term) or a custom estimator it may act."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.rl import RLConfig

    uniform = [_rollout(1.0), _rollout(1.0)]
    assert make_gate(GateConfig(reject_uniform=True))(uniform, GRPOAdvantageConfig()) == "gate: every reward is 1"
    run = tmp_path / "rl.toml"
    run.write_text("[orchestrator.gate]\nreject_uniform = true\n")
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run), "--orchestrator.advantage.filter-zero", "true"])
    assert ("`advantage.filter_zero = true` (from --orchestrator.advantage.filter-zero) can never act beside "
            f"`gate.reject_uniform = true` (in {run}): under the 'grpo' estimator") in str(err.value)
    assert "remove advantage.filter_zero (the gate replaces it), or set gate.reject_uniform = false" in str(err.value)
    src = '[{"name": "a", "env": {"id": "digit-bandit"}, "advantage": {"type": "rloo", "filter_zero": true}}]'
    with pytest.raises(ConfigError, match=r"`train.source.0.advantage.filter_zero = true` \(from "):
        parse_config(RLConfig, ["@", str(run), "--orchestrator.train.source", src])
    OrchestratorConfig(gate={"reject_uniform": True, "keep_for_kl": True}, advantage={"filter_zero": True})
    OrchestratorConfig(gate={"reject_uniform": True}, advantage={"type": "custom", "import_path": "m:f", "filter_zero": True})
    assert parse_config(RLConfig, ["--orchestrator.advantage.filter-zero", "true"]).orchestrator.advantage.filter_zero
