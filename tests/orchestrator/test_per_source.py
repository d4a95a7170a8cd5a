"""Per-source settings: train groups of each source's own size (cut, advantages, gate budget, checks) and eval
sources with their own interval, num_examples, rollouts_per_example and sampling. Hand-worked values."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from tests.orchestrator.fakes import EchoEnv, ScriptedClient, tiny_tokenizer

from prime_rl.config.orchestrator import (
    EvalCommandConfig,
    EvalConfig,
    OrchestratorConfig,
    RendererConfig,
    TrainSamplingConfig,
    batch_size_problem,
)
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.outputs import trace_rows
from prime_rl.orchestrator.scheduler import Scheduler
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.types import PolicyVersion

A, B = 0, 1  # source indices: "a" plays groups of 2, "b" groups of 3


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    return make_renderer(tiny_tokenizer(tmp_path_factory.mktemp("tok")), RendererConfig())


class FixedStream:
    """A task stream whose sources come in a fixed order (the real one draws them by ratio)."""

    def __init__(self, sources, order):
        self.sources, self.order = sources, list(order)
        self.pos = defaultdict(int)

    def next(self):
        i = self.order.pop(0)
        j = self.pos[i]
        self.pos[i] += 1
        return i, j, self.sources[i].tasks("train")[j]


class HeldClient(ScriptedClient):
    """Answers rollout k of group g with `answer(g, k)` once the test releases group g (`release`)."""

    def __init__(self, tok, answer):
        super().__init__(tok, lambda p, i: "")
        self.answer = answer
        self.open: dict[int, asyncio.Event] = defaultdict(asyncio.Event)

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        gid, k = int(rollout_id.split("/g")[1].split("/")[0]), int(rollout_id.rsplit("/r", 1)[1])
        await self.open[gid].wait()
        self.script = lambda p, i: self.answer(gid, k)
        return await super().generate(prompt_ids, sampling, rollout_id=rollout_id, stop_token_ids=stop_token_ids,
                                      max_tokens=max_tokens)  # fmt: skip


def _cfg(**kw) -> OrchestratorConfig:
    return OrchestratorConfig(**{
        "batch_size": 6, "seq_len": 512, "max_async_level": 0, "weights_timeout_s": 30,
        "concurrency": {"max_inflight": 64},
        "train": {"group_size": 8, "sampling": {"max_completion_tokens": 8}, "source": [
            {"name": "a", "env": {"id": "digit-bandit"}, "group_size": 2},
            {"name": "b", "env": {"id": "digit-bandit"}, "group_size": 3},
        ]}, **kw,
    })  # fmt: skip


def _sched(renderer, order, answer, **kw):
    srcs = [InProcessSource("a", EchoEnv(16)), InProcessSource("b", EchoEnv(16))]
    client = HeldClient(renderer._tokenizer, answer)
    policy = PolicyVersion(0)
    sched = Scheduler(_cfg(**kw), sources=srcs, stream=FixedStream(srcs, order), client=client, renderer=renderer,
                      policy=policy)  # fmt: skip
    return sched, client, policy


async def _release(sched, client, gids):
    """Let the groups finish one by one, in this order (each collected before the next is released)."""
    for g in gids:
        while g not in sched.running:  # launched by next_batch, which runs concurrently
            await asyncio.sleep(0.001)
        client.open[g].set()
        while g in sched.running:
            await asyncio.sleep(0.001)


def _by_group(batch):
    out = defaultdict(list)
    for r in batch.rollouts:
        out[r.group_id].append(r)
    return dict(out)


# ---- config ----
def test_source_group_size_defaults_to_the_global_one():
    train = TrainSamplingConfig(group_size=4, source=[{"name": "a", "env": {"id": "digit-bandit"}},
                                                      {"name": "b", "env": {"id": "digit-bandit"}, "group_size": 2}])
    assert train.group_sizes == [4, 2]


def test_source_sampling_sets_its_fields_over_train_sampling():
    train = TrainSamplingConfig(sampling={"temperature": 0.9, "max_completion_tokens": 40, "seed": 3}, source=[
        {"name": "a", "env": {"id": "digit-bandit"}, "sampling": {"temperature": 0.5}},
        {"name": "b", "env": {"id": "digit-bandit"}}])  # fmt: skip
    a = train.source[0].sampling
    assert (a.temperature, a.max_completion_tokens, a.seed) == (0.5, 40, 3)  # unset fields: train.sampling's
    assert train.source[1].sampling is None  # the scheduler samples b with train.sampling


def test_batch_size_is_checked_against_every_group_size():
    one = TrainSamplingConfig(group_size=8, source=[{"env": {"id": "digit-bandit"}, "group_size": 4}])
    assert batch_size_problem(12, one) is None  # one size, 4: 12 is a multiple
    msg = batch_size_problem(10, one)
    assert "batch_size (10) must be a multiple of train.source.0.group_size (4)" in msg and "batch_size = 8" in msg
    mixed = _cfg().train  # sizes 2 and 3: no multiple required, at least the largest
    assert batch_size_problem(5, mixed) is None and batch_size_problem(3, mixed) is None
    msg = batch_size_problem(2, mixed, prefix="orchestrator.")
    assert "orchestrator.batch_size (2) is below orchestrator.train.source.1.group_size (3, source 'b')" in msg
    with pytest.raises(ValueError, match=r"batch_size \(2\) is below train.source.1.group_size"):
        _cfg(batch_size=2)


def test_eval_sources_refuse_a_group_size():
    with pytest.raises(ValueError, match=r"`source.0.group_size = 4` is a train-source setting: .*rollouts_per_example"):
        EvalConfig(source=[{"env": {"id": "digit-bandit"}, "group_size": 4}])


# ---- a cut step with two group sizes ----
async def test_a_step_draws_whole_groups_of_each_sources_size_until_batch_size(renderer):
    # order a, b, b: launched a(2) -> 2, b(3) -> 5, b(3) -> 8 >= 6 rollouts: the launch stops (max_async_level 0).
    # Released in launch order: 2 + 3 = 5 < 6, then 8 >= 6: the step holds all three groups, 8 rollouts.
    # Rewards: group a [1, 0] -> GRPO [0.5, -0.5]; groups b [1, 0, 0] -> [2/3, -1/3, -1/3] (mean of 3).
    sched, client, _ = _sched(renderer, [A, B, B, A], lambda g, k: "r3" if k == 0 else "r0")
    cut = asyncio.create_task(sched.next_batch(1))
    await _release(sched, client, [0, 1, 2])
    batch = await cut
    await sched.aclose()
    groups = _by_group(batch)
    assert sorted(groups) == [0, 1, 2] and len(batch.rollouts) == 8
    assert [(g[0].source, len(g)) for _, g in sorted(groups.items())] == [("a", 2), ("b", 3), ("b", 3)]
    assert [r.advantage for r in groups[0]] == [0.5, -0.5]
    for gid in (1, 2):
        assert [r.advantage for r in groups[gid]] == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-12)
    # traces: the first rollout of each group, whatever its size
    assert [(t["group_id"], t["source"]) for t in trace_rows(batch.rollouts, 3, 1)] == [(0, "a"), (1, "b"), (2, "b")]


async def test_a_group_past_the_cut_trains_in_the_next_step(renderer):
    # Launched for step 1: g0 a(2), g1 b(3), g2 b(3). Released b, b first: 3 + 3 = 6 -> step 1 = g1, g2 (6
    # rollouts, source b only); g0 stays. Policy 1 loads; step 2 may launch 6 - 2 outstanding: g3 a(2) -> 4,
    # g4 a(2) -> 6. Released g0, g3, g4: 2 + 2 + 2 = 6 -> step 2 = g0, g3, g4 (source a only).
    sched, client, policy = _sched(renderer, [A, B, B, A, A, B], lambda g, k: f"r{k % 2}")
    cut = asyncio.create_task(sched.next_batch(1))
    await _release(sched, client, [1, 2])
    b1 = await cut
    assert sorted(_by_group(b1)) == [1, 2] and {r.source for r in b1.rollouts} == {"b"} and len(b1.rollouts) == 6
    assert sched.outstanding() == [(A, 0)]
    client.version = 1
    policy.set(1)
    cut = asyncio.create_task(sched.next_batch(2))
    await _release(sched, client, [0, 3, 4])
    b2 = await cut
    await sched.aclose()
    assert sorted(_by_group(b2)) == [0, 3, 4] and {r.source for r in b2.rollouts} == {"a"} and len(b2.rollouts) == 6


async def test_gate_budget_counts_each_group_with_its_own_size(renderer):
    # Every reward 0: the gate rejects every group. max_resample_factor 1.5 -> budget ceil(1.5 * 6) = 9 rollouts.
    # Examined in order g0 a(2), g1 b(3), g2 b(3): 8 < 9; g3 a(2): 10 >= 9, spent. The step is filled with
    # rejected groups in examination order to 6 rollouts: g0 + g1 = 5, + g2 = 8. Sampled beyond it: g3's 2.
    sched, client, _ = _sched(renderer, [A, B, B, A, B, B], lambda g, k: "r0",
                              gate={"reject_uniform": True, "max_resample_factor": 1.5})  # fmt: skip
    cut = asyncio.create_task(sched.next_batch(1))
    await _release(sched, client, [0, 1, 2, 3])
    batch = await cut
    await sched.aclose()
    assert sorted(_by_group(batch)) == [0, 1, 2] and all(r.filtered for r in batch.rollouts)
    assert (batch.gate_rejected_groups, batch.gate_extra_rollouts, batch.gate_budget_spent) == (4, 2, True)


# ---- eval sources with their own settings ----
def test_eval_source_settings_default_to_the_eval_section():
    ev = EvalConfig(interval=2, num_examples=3, rollouts_per_example=1, sampling={"max_completion_tokens": 40},
                    source=[{"name": "a", "env": {"id": "digit-bandit"}},
                            {"name": "b", "env": {"id": "digit-bandit"}, "interval": 3, "num_examples": 2,
                             "rollouts_per_example": 4, "sampling": {"temperature": 0.5}}])  # fmt: skip
    a, b = ev.settings_of(ev.source[0]), ev.settings_of(ev.source[1])
    assert (a.interval, a.num_examples, a.rollouts_per_example) == (2, 3, 1)
    assert (a.sampling.temperature, a.sampling.max_completion_tokens) == (1.0, 40)
    assert (b.interval, b.num_examples, b.rollouts_per_example) == (3, 2, 4)
    assert (b.sampling.temperature, b.sampling.max_completion_tokens) == (0.5, 40)  # the unset field: eval.sampling's
    assert ev.settings_of(None) == a  # a train source evaluated on its eval split
    assert EvalConfig(source=[{"env": {"id": "digit-bandit"}, "interval": 5}]).scheduled
    assert not EvalConfig(source=[{"env": {"id": "digit-bandit"}}]).scheduled


def test_greedy_with_several_rollouts_is_refused_per_source():
    src = {"name": "b", "env": {"id": "digit-bandit"}}
    with pytest.raises(ValueError, match=r"eval.source.0.sampling.temperature = 0 with eval.source.0.rollouts_per_"):
        EvalConfig(source=[{**src, "sampling": {"temperature": 0}, "rollouts_per_example": 4}])
    with pytest.raises(ValueError, match=r"eval.sampling.temperature = 0 with eval.source.0.rollouts_per_example = 4"
                                         r".*\(the source sets no sampling.temperature of its own: \[eval\]'s applies\)"):
        EvalConfig(sampling={"temperature": 0}, source=[{**src, "rollouts_per_example": 4}])  # greedy from eval.sampling
    EvalConfig(sampling={"temperature": 0}, source=[{**src, "rollouts_per_example": 4, "sampling": {"temperature": 0.7}}])
    EvalConfig(sampling={"temperature": 0}, rollouts_per_example=4,  # the global pair is only a default here
               source=[{**src, "rollouts_per_example": 1}])  # fmt: skip


def test_eval_command_refuses_a_source_interval():
    with pytest.raises(ValueError, match=r"eval.source.0.interval is set: evals evaluates every source once per model"):
        EvalCommandConfig(eval={"source": [{"env": {"id": "digit-bandit"}, "interval": 2}]})


def test_eval_command_refuses_eval_interval():
    # evals scores each model (or checkpoint) once: an interval would be accepted and do nothing
    with pytest.raises(ValueError, match=r"eval.interval = 5 is set, but evals scores once per model"):
        EvalCommandConfig(eval={"interval": 5})


async def test_each_eval_source_on_its_own_schedule_and_settings(renderer, tmp_path):
    # a: interval 2 (global), 2 tasks (global), 1 rollout, temperature 1; b: interval 3, 3 tasks, 2 rollouts at
    # temperature 0.5 with 2 tokens per turn. max_steps 7: a at versions 0, 2, 4, 6, 7; b at 0, 3, 6, 7.
    cfg = OrchestratorConfig(
        output_dir=tmp_path / "run", max_steps=7, seq_len=512,
        train={"group_size": 2, "source": [{"name": "a", "env": {"id": "digit-bandit"}}]},
        eval={"interval": 2, "num_examples": 2, "sampling": {"max_completion_tokens": 32}, "source": [
            {"name": "a", "env": {"id": "digit-bandit"}},
            {"name": "b", "env": {"id": "digit-bandit"}, "interval": 3, "num_examples": 3, "rollouts_per_example": 2,
             "sampling": {"temperature": 0.5, "max_completion_tokens": 2}},
        ]},
    )  # fmt: skip
    a, b = InProcessSource("a", EchoEnv(8)), InProcessSource("b", EchoEnv(8))
    client = EvalClient(renderer._tokenizer)
    orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=[a], eval_sources=[a, b], echo=False)
    due = {v: [s.name for s in orch._due_sources(v)] for v in range(8)}
    assert due == {0: ["a", "b"], 1: [], 2: ["a"], 3: ["b"], 4: ["a"], 5: [], 6: ["a", "b"], 7: ["a", "b"]}
    m3 = await orch.evaluate(3)
    assert set(orch._due_sources(3)) == set()  # evaluated once
    assert (m3["eval/b/tasks"], m3["eval/b/rollouts"]) == (3, 6) and "eval/a/tasks" not in m3
    assert set(client.seen) == {("b", 0.5, 2)}  # b's own temperature and max_completion_tokens
    assert m3["eval/b/avg@2"] == 0.0  # "r0": reward 0 / 3
    client.seen.clear()
    m6 = await orch.evaluate(6)
    assert set(client.seen) == {("a", 1.0, 32), ("b", 0.5, 2)}
    assert (m6["eval/a/tasks"], m6["eval/a/rollouts"], m6["eval/b/rollouts"]) == (2, 2, 6)
    assert m6["eval/a/avg@1"] == 1.0  # "r3": reward 3 / 3
    assert "eval/avg@1" not in m6 and "eval/avg@2" not in m6  # k differs across sources: no all-source avg@k
    assert m6["eval/tasks"] == 5 and m6["eval/pass@1"] == pytest.approx((1 + 1 + 0 + 0 + 0) / 5)
    rows = {(r["source"], len(r["rewards"])) for r in _rows(tmp_path / "run" / "eval" / "step_6.jsonl")}
    assert rows == {("a", 1), ("b", 2)}


class EvalClient(ScriptedClient):
    """Answers source b's eval rollouts `r0`, the others `r3`; records (source, temperature, max_tokens)."""

    def __init__(self, tok):
        super().__init__(tok, lambda p, i: "")
        self.seen: list[tuple[str, float, int]] = []

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        src = rollout_id.split("/")[1]
        self.seen.append((src, sampling.temperature, max_tokens))
        self.script = lambda p, i: "r0" if src == "b" else "r3"
        return await super().generate(prompt_ids, sampling, rollout_id=rollout_id, stop_token_ids=stop_token_ids,
                                      max_tokens=max_tokens)  # fmt: skip


def _rows(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_eval_refuses_a_source_interval():
    from prime_rl.config.trainer import SFTConfig

    with pytest.raises(ValueError, match=r"eval.source.0.interval is set: sft evaluates every source at eval.interval"):
        SFTConfig(eval={"interval": 2, "source": [{"env": {"id": "reverse-text"}, "interval": 3}]})


def test_plan_for_run_refuses_train_sources_of_different_group_sizes(tmp_path):
    from prime_rl.simulate.measure import plan_for_run

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "orchestrator.toml").write_text(
        "[train]\ngroup_size = 8\n\n[[train.source]]\nname = 'a'\ngroup_size = 4\n\n[[train.source]]\nname = 'b'\n"
    )
    with pytest.raises(ValueError, match=r"group sizes differ \(\[4, 8\]"):
        plan_for_run(tmp_path, None, {}, cpu_per_turn_s=0.0)


def test_eval_settings_without_an_interval_anywhere_are_refused(tmp_path):
    """The orchestrator evaluates a source only at an interval, its own or eval.interval (`eval_due`): eval settings
    with no interval anywhere, or a source without one beside a source that has one, would never evaluate; rl refuses
    them naming the field and where it was set. evals (scores once) and sft's [eval] (own schedule) keep working."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.orchestrator import EvalCommandConfig
    from prime_rl.config.rl import RLConfig
    from prime_rl.config.trainer import SFTConfig
    from prime_rl.orchestrator.eval import eval_due

    run = tmp_path / "rl.toml"
    run.write_text('[orchestrator.eval]\ninterval = "None"\nnum_examples = 5\n\n[[orchestrator.eval.source]]\n'
                   'name = "d"\nenv.id = "digit-bandit"\n')
    assert not any(eval_due(v, None, 10, []) for v in range(11))  # no interval: never due, the final one included
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run)])
    msg = str(err.value)
    assert (f"`eval.num_examples = 5` (in {run}), eval.source (1 entry) are set, but eval.interval is None and no "
            "eval source sets an interval") in msg, msg
    assert "set eval.interval = N (or eval.source.N.interval per source)" in msg
    with pytest.raises(ConfigError, match=r"`eval.rollouts_per_example = 4` \(from --orchestrator.eval"):
        parse_config(RLConfig, ["--orchestrator.eval.rollouts-per-example", "4"])
    assert parse_config(RLConfig, ["@", str(run), "--orchestrator.eval.interval", "5"]).orchestrator.eval.interval == 5

    mixed = tmp_path / "mixed.toml"
    mixed.write_text('[[orchestrator.eval.source]]\nname = "a"\nenv.id = "digit-bandit"\ninterval = 5\n\n'
                     '[[orchestrator.eval.source]]\nname = "b"\nenv.id = "digit-bandit"\n')
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(mixed)])
    assert (f"eval.source.1 ('b') has no interval of its own and eval.interval is None, so it is never evaluated "
            f"(`eval.source.0.interval = 5` (in {mixed}) applies to that source only); set eval.source.1.interval = N, "
            "or eval.interval = N") in str(err.value)
    both = parse_config(RLConfig, ["@", str(mixed), "--orchestrator.eval.interval", "10"])
    assert [both.orchestrator.eval.settings_of(s).interval for s in both.orchestrator.eval.source] == [5, 10]
    # nothing set, or only the interval set off: accepted (no eval, as the default)
    assert parse_config(RLConfig, ["--orchestrator.eval.interval", "None"]).orchestrator.eval.interval is None
    # evals (no interval) and sft (its own eval.interval) schedule otherwise and stay accepted
    src = '[{"name": "d", "env": {"id": "digit-bandit"}}]'
    assert parse_config(EvalCommandConfig, ["--model.name", "m", "--eval.source", src,
                                            "--eval.num-examples", "3"]).eval.num_examples == 3  # fmt: skip
    sft = SFTConfig(eval={"interval": 5, "source": [{"name": "d", "env": {"id": "digit-bandit"}}], "num_examples": 3})
    assert sft.eval.num_examples == 3


@pytest.mark.parametrize("cls,pre,section,extra", [
    ("rl", "--orchestrator.eval.", "[orchestrator.eval]", ["--orchestrator.eval.interval", "5"]),
    ("evals", "--eval.", "[eval]", ["--model.name", "m"]),
    ("sft", "--eval.", "[eval]", ["--eval.interval", "5"]),
])
def test_the_greedy_refusal_names_the_fields_set_and_the_commands_section(cls, pre, section, extra):
    """An eval source that sets neither temperature nor rollouts_per_example takes the section's: the refusal names
    the section's fields (where the user set them, flags here), not eval.source.0.*, and the section as the command
    spells it ([eval] in evals and sft, [orchestrator.eval] in rl)."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.rl import RLConfig
    from prime_rl.config.trainer import SFTConfig

    config = {"rl": RLConfig, "evals": EvalCommandConfig, "sft": SFTConfig}[cls]
    src = '[{"name": "d", "env": {"id": "digit-bandit"}}]'
    with pytest.raises(ConfigError) as err:
        parse_config(config, [*extra, f"{pre}source", src, f"{pre}rollouts-per-example", "4",
                              f"{pre}sampling.temperature", "0"])  # fmt: skip
    msg = str(err.value)
    assert ("eval source 0 ('d'): eval.sampling.temperature = 0 with eval.rollouts_per_example = 4: greedy decoding"
            in msg), msg
    assert f"(the source sets no sampling.temperature or rollouts_per_example of its own: {section}'s applies)" in msg
    flag = pre.removeprefix("--")
    assert (f"{flag}sampling.temperature from {pre}sampling.temperature, {flag}rollouts_per_example from "
            f"{pre}rollouts-per-example)") in msg
    assert "eval.source.0." not in msg and ("orchestrator" in msg) == (cls == "rl")


def test_a_source_advantage_merges_over_the_global_one_like_sampling(tmp_path):
    """A source's advantage sets its type; the fields it leaves unset are [orchestrator.advantage]'s where its
    estimator has them (a global std_normalize or filter_zero was dropped before); a global field that acts on no
    source (every source sets its own advantage) is refused naming where it was set."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.orchestrator import GRPOAdvantageConfig, RLOOAdvantageConfig
    from prime_rl.config.rl import RLConfig

    two = [{"name": "a", "env": {"id": "digit-bandit"}, "advantage": {"type": "grpo"}},
           {"name": "b", "env": {"id": "digit-bandit"}, "advantage": {"type": "rloo", "filter_zero": False}},
           {"name": "c", "env": {"id": "digit-bandit"}}]  # fmt: skip
    cfg = OrchestratorConfig(advantage={"std_normalize": True, "filter_zero": True, "mask_truncated": True},
                             train={"source": two})  # fmt: skip
    a, b, c = (src.advantage for src in cfg.train.source)
    assert a == GRPOAdvantageConfig(std_normalize=True, filter_zero=True, mask_truncated=True)
    assert b == RLOOAdvantageConfig(filter_zero=False, mask_truncated=True) and c is None
    # the config rl writes (every field, the sources merged) reads back unchanged
    again = OrchestratorConfig.model_validate(cfg.model_dump())
    assert [s.advantage for s in again.train.source] == [a, b, None]

    run = tmp_path / "rl.toml"
    run.write_text('[orchestrator.advantage]\ntype = "maxrl"\n\n[[orchestrator.train.source]]\nname = "a"\n'
                   'env.id = "digit-bandit"\nadvantage = { type = "rloo" }\n')
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run)])
    assert (f"`advantage.type = 'maxrl'` (in {run}) acts on no train source: every source sets its own advantage"
            in str(err.value))
    assert "remove advantage.type from [orchestrator.advantage], or set the value on a source's advantage" in str(
        err.value)
    with pytest.raises(ConfigError, match=r"`advantage.std_normalize = true` \(from --orchestrator.advantage.std-norm"):
        parse_config(RLConfig, ["@", str(run), "--orchestrator.advantage.type", "grpo",
                                "--orchestrator.advantage.std-normalize", "true"])  # fmt: skip
    merged = parse_config(RLConfig, ["@", str(run), "--orchestrator.advantage.type", "grpo",
                                     "--orchestrator.advantage.filter-zero", "true"])  # fmt: skip
    assert merged.orchestrator.train.source[0].advantage == RLOOAdvantageConfig(filter_zero=True)
