"""Issue 13 on the orchestrator side: a number that is missing or not finite never reaches training, a rollout that
was never sampled is never scored, a model's non-object tool arguments are its own mistake, caches are keyed by
source, and a run with nothing to train stops. Each test failed on the code before the fix."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math

import pytest
from tests.orchestrator.fakes import CounterEnv, ScriptedClient, tiny_tokenizer

from prime_rl.config.orchestrator import OrchestratorConfig, RendererConfig, SamplingConfig
from prime_rl.envs.base import Environment, Episode, Task, VerifyResult
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.eval import summarize
from prime_rl.orchestrator.lengths import PromptTooLong, check_prompt_lengths
from prime_rl.orchestrator.main import NoProgressError, Orchestrator
from prime_rl.orchestrator.scheduler import Scheduler
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.step_metrics import step_metrics
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.types import PolicyVersion, Rollout
from prime_rl.transport.atomic import atomic_write_dir


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def renderer(tok):
    return make_renderer(tok, RendererConfig(name="qwen3"))


class ScoreEpisode(Episode):
    def __init__(self, task, reward, log):
        self.task, self.reward, self.log = task, reward, log

    def call_tool(self, name, arguments):
        self.log.append(("tool", name, arguments))
        return "ok"

    def verify(self, final_response=None):
        self.log.append(("verify", self.task.task_id))
        return self.reward if not isinstance(self.reward, float | int | str | None) else VerifyResult(self.reward)


class CycleEnv(Environment):
    """Single-turn tasks; the k-th episode opened gets `rewards[k % len(rewards)]` (the issue's [NaN, 1, 0, 1, 0.5])."""

    name = "cycle"

    def __init__(self, rewards, n=8, prompt="Say something"):
        self.rewards, self.n, self.prompt = list(rewards), n, prompt
        self.count = itertools.count()
        self.log: list = []

    def tasks(self, split):
        return [Task(f"t{i}", split, i, [{"role": "user", "content": f"{self.prompt} ({i})."}]) for i in range(self.n)]

    def episode(self, task):
        return ScoreEpisode(task, self.rewards[next(self.count) % len(self.rewards)], self.log)


def _cfg(**kw):
    base = dict(batch_size=5, train={"group_size": 5, "sampling": {"max_completion_tokens": 8}}, seq_len=512,
                concurrency={"max_inflight": 5}, max_async_level=2)  # fmt: skip
    base.update(kw)
    return OrchestratorConfig(**base)


async def _one_batch(renderer, src, cfg, client=None):
    client = client or ScriptedClient(renderer._tokenizer, lambda p, k: "hi")
    sched = Scheduler(cfg, sources=[src], stream=TaskStream([src], seed=0), client=client, renderer=renderer,
                      policy=PolicyVersion(0))  # fmt: skip
    try:
        return await sched.next_batch(1)
    finally:
        await sched.aclose()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), None, "1.0", True])
async def test_invalid_reward_masks_the_rollout_and_the_group_stays_finite(renderer, caplog, bad):
    src = InProcessSource("cyc", CycleEnv([bad, 1.0, 0.0, 1.0, 0.5]))
    with caplog.at_level(logging.WARNING):
        batch = await _one_batch(renderer, src, _cfg())
    rs = sorted(batch.rollouts, key=lambda r: r.masked, reverse=True)
    assert [r.masked for r in rs] == [True, False, False, False, False]
    assert rs[0].error.startswith("env/invalid_reward:") and rs[0].advantage == 0.0 and rs[0].reward == 0.0
    # Dr. GRPO by hand over the four valid rewards: mean 0.625
    assert sorted(r.advantage for r in rs[1:]) == pytest.approx(sorted([0.375, -0.625, 0.375, -0.125]))
    m = step_metrics(batch, 1.0, 0)
    assert m["errors/env/invalid_reward"] == 1 and m["error_pct"] == 20.0 and m["reward"] == pytest.approx(0.625)
    assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
    logged = [rec.getMessage() for rec in caplog.records if "invalid_reward" in rec.getMessage()]
    assert len(logged) == 1 and f"task {rs[0].task.task_id!r}" in logged[0] and "source 'cyc'" in logged[0]


async def test_verify_returning_no_verify_result_masks(renderer):
    src = InProcessSource("cyc", CycleEnv([{"reward": 1.0}]))
    r = await run_rollout(src.tasks("train")[0], src, ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer,
                          SamplingConfig(), AgentLimits(512, 8))  # fmt: skip
    assert r.masked and r.error.startswith("env/invalid_reward:"), r.error


async def test_non_finite_advantage_masks_the_rollout(renderer):
    import prime_rl.orchestrator.advantages as adv

    adv.register_advantage("nan-first", lambda rewards, mask, cfg: [float("nan")] + [1.0] * (len(rewards) - 1))
    try:
        src = InProcessSource("cyc", CycleEnv([1.0, 0.0]))
        batch = await _one_batch(renderer, src, _cfg(advantage={"type": "custom", "import_path": "nan-first"}))
    finally:
        adv.ADVANTAGES.unregister("nan-first")
    masked = [r for r in batch.rollouts if r.masked]
    assert len(masked) == 1 and masked[0].error.startswith("advantage/non_finite") and masked[0].advantage == 0.0
    assert all(math.isfinite(r.advantage) for r in batch.rollouts)


class NaNLogprobClient(ScriptedClient):
    async def generate(self, *a, **kw):
        res = await super().generate(*a, **kw)
        res.logprobs[1] = float("nan")
        return res


async def test_non_finite_sampled_logprob_masks_the_rollout(renderer, caplog):
    src = InProcessSource("cyc", CycleEnv([1.0]))
    with caplog.at_level(logging.WARNING):
        r = await run_rollout(src.tasks("train")[3], src, NaNLogprobClient(renderer._tokenizer, lambda p, k: "hello"),
                              renderer, SamplingConfig(), AgentLimits(512, 8))  # fmt: skip
    assert r.masked and r.error.startswith("inference/non_finite_logprob:") and "token 1" in r.error, r.error
    assert r.samples == [] and r.error_kind == "inference/non_finite_logprob" and r.rollout_id is None
    assert r.task.task_id == "t3" and r.source == "cyc"  # what the scheduler's log line names (test_admission)


@pytest.mark.parametrize("arguments", [[1, 2], "add one", None, 3, "[1]"])
async def test_tool_arguments_that_are_not_an_object_are_a_malformed_call(renderer, tok, arguments):
    env = CounterEnv(4)
    src = InProcessSource("counter", env)
    call = "<tool_call>\n" + json.dumps({"name": "add", "arguments": arguments}) + "\n</tool_call>"
    client = ScriptedClient(tok, lambda p, k: [call, "the total is 0"][k])
    r = await run_rollout(src.tasks("train")[0], src, client, renderer, SamplingConfig(), AgentLimits(4096, 64))
    assert not r.masked, r.error
    assert r.malformed_tool_calls == 1 and env.episodes[0].total == 0  # never reached the environment
    answer = tok.decode(client.calls[1]["prompt_ids"])
    assert "could not parse your tool call (`arguments` must be a JSON object" in answer
    assert "tool_calls" not in r.messages[-3]  # the assistant turn lists no (malformed) call
    assert r.reward == 1.0  # the episode still verifies ("0" is the untouched total)


async def test_tool_arguments_as_a_json_object_string_reach_the_environment(renderer, tok):
    env = CounterEnv(4)
    src = InProcessSource("counter", env)
    call = "<tool_call>\n" + json.dumps({"name": "add", "arguments": json.dumps({"x": 3})}) + "\n</tool_call>"
    client = ScriptedClient(tok, lambda p, k: [call, "the total is 3"][k])
    r = await run_rollout(src.tasks("train")[0], src, client, renderer, SamplingConfig(), AgentLimits(4096, 64))
    assert r.malformed_tool_calls == 0 and env.episodes[0].total == 3 and r.reward == 1.0


async def test_prompt_longer_than_seq_len_is_masked_not_scored(renderer, tok):
    env = CycleEnv([0.0], prompt="A long prompt " * 40)
    src = InProcessSource("long", env)
    client = ScriptedClient(tok, lambda p, k: "x")
    r = await run_rollout(src.tasks("train")[0], src, client, renderer, SamplingConfig(), AgentLimits(64, 8))
    assert r.masked and r.error.startswith("prompt_too_long:") and "seq_len 64" in r.error, r.error
    assert not r.truncated and r.num_turns == 0 and client.calls == []
    assert not [e for e in env.log if e[0] == "verify"]  # never verified: not a reward of 0


async def test_first_prompt_cache_is_keyed_by_source(renderer, tok):
    """Two sources whose task ids overlap (t0, t1, ...) but whose prompts differ: each rollout samples on its own
    source's prompt (the cache used to hand the second source the first one's)."""
    a, b = InProcessSource("a", CycleEnv([1.0], prompt="Apples")), InProcessSource("b", CycleEnv([1.0], prompt="Pears"))
    client = ScriptedClient(tok, lambda p, k: "x")
    for src in (a, b, a, b):
        await run_rollout(src.tasks("train")[1], src, client, renderer, SamplingConfig(), AgentLimits(512, 8))
    prompts = [tok.decode(c["prompt_ids"]) for c in client.calls]
    assert ["Apples (1)" in p for p in prompts] == [True, False, True, False]
    assert ["Pears (1)" in p for p in prompts] == [False, True, False, True]


def test_duplicate_source_names_are_refused():
    two = [{"name": "g", "env": {"id": "gridsim"}}, {"name": "g", "env": {"id": "gridsim", "args": {"seed": 1}}}]
    with pytest.raises(ValueError, match="both named 'g'"):
        OrchestratorConfig(train={"source": two})
    with pytest.raises(ValueError, match="both named 'g'"):
        OrchestratorConfig(eval={"source": two})
    OrchestratorConfig(train={"source": [two[0], {**two[1], "name": "g2"}]})


def test_two_unnamed_sources_are_refused_with_names_suggested(tmp_path):
    """Two sources that set no name are both 'default': the refusal says they set no name and suggests one per entry
    from its environment (a single unnamed source keeps 'default', which its metrics and checkpoints use)."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.rl import RLConfig

    run = tmp_path / "rl.toml"
    run.write_text('[[orchestrator.train.source]]\nenv.id = "digit-bandit"\n\n'
                   '[[orchestrator.train.source]]\nenv.id = "reverse-text"\n')
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run)])
    assert ("entries 0 and 1 set no `name`, so both are named 'default' (the name of an unnamed source): "
            "per-source metrics, eval results and caches are keyed by the source's name, so they would mix; give each "
            'source its own `name` (e.g. name = "digit-bandit" on entry 0 and name = "reverse-text" on entry 1) '
            f"(in {run})") in str(err.value)
    same = [{"env": {"id": "gridsim"}}, {"env": {"id": "gridsim", "args": {"seed": 1}}}]
    with pytest.raises(ValueError, match=r'name = "gridsim-1" on entry 0 and name = "gridsim-2" on entry 1'):
        OrchestratorConfig(eval={"interval": 5, "source": same})
    assert OrchestratorConfig(train={"source": same[:1]}).train.source[0].name == "default"


def _rollout(reward, masked=False):
    return Rollout(task=Task("t", "eval", 0, []), source="s", reward=reward, masked=masked)


def test_avg_and_pass_at_k_are_per_task_with_masked_rollouts_left_out():
    # task 0: one unmasked rollout scoring 1 (three masked); task 1: four rollouts scoring 0.5, 0.5, 0, 0
    t0 = [_rollout(1.0)] + [_rollout(0.0, masked=True)] * 3
    t1 = [_rollout(0.5), _rollout(0.5), _rollout(0.0), _rollout(0.0)]
    m = summarize([t0, t1], at_k=4, threshold=0.5)
    assert m["avg@4"] == pytest.approx((1.0 + 0.25) / 2)  # per rollout it would be (1 + 1) / 5 = 0.4
    assert m["pass@4"] == 1.0 and m["pass@1"] == pytest.approx((1 / 1 + 2 / 4) / 2)
    assert m["scored_tasks"] == 2 and m["error_pct"] == pytest.approx(100 * 3 / 8)
    everything_masked = summarize([[_rollout(0.0, masked=True)]], at_k=1, threshold=1.0)
    assert math.isnan(everything_masked["avg@1"]) and everything_masked["scored_tasks"] == 0


class _Named:
    def __init__(self, name, env):
        self.name, self.env = name, env

    def tasks(self, split):
        return self.env.tasks(split)


def test_prompt_length_preflight(renderer, caplog):
    short, long_ = CycleEnv([1.0], n=10), CycleEnv([1.0], n=10, prompt="word " * 100)
    assert check_prompt_lengths([(_Named("s", short), "train")], renderer, 128)["s"] < 128
    with pytest.raises(PromptTooLong, match=r"source 'l' \(train split\): all 10 sampled first prompts"):
        check_prompt_lengths([(_Named("l", long_), "train")], renderer, 128)

    class Mixed(CycleEnv):
        def tasks(self, split):
            return short.tasks(split)[:5] + long_.tasks(split)[5:]

    with caplog.at_level(logging.WARNING):
        check_prompt_lengths([(_Named("m", Mixed([1.0])), "train")], renderer, 128)
    assert "5 of 10 sampled first prompts" in caplog.text


class CrashEnv(CycleEnv):
    def episode(self, task):
        ep = super().episode(task)
        ep.verify = lambda final_response=None: 1 / 0
        return ep


async def _run_until_no_progress(renderer, tmp_path, src):
    """Run the orchestrator (4 rollouts a step, `max_empty_steps = 2`) beside a fake trainer that publishes each
    version once its batch is written; returns (config, the NoProgressError's message)."""
    cfg = _cfg(output_dir=tmp_path / "run", batch_size=4, train={"group_size": 2, "sampling": {"max_completion_tokens": 8}},
               max_steps=10, max_empty_steps=2, max_async_level=0)  # fmt: skip
    orch = Orchestrator(cfg, client=ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                        train_sources=[src], poll_s=0.005, echo=False)  # fmt: skip

    async def trainer():
        for n in itertools.count(1):
            while not (cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin").exists():
                await asyncio.sleep(0.005)
            atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "x").write_bytes(b"x"))

    t = asyncio.create_task(trainer())
    try:
        with pytest.raises(NoProgressError) as e:
            await orch.run()
    finally:
        t.cancel()
    return cfg, str(e.value)


async def test_run_stops_after_max_empty_steps(renderer, tmp_path):
    """An environment whose verify always fails: every rollout masked, no loss token; the run stops with an error
    naming the cause after `max_empty_steps` steps instead of skipping updates forever."""
    cfg, msg = await _run_until_no_progress(renderer, tmp_path, InProcessSource("crashy", CrashEnv([1.0])))
    assert "steps 1-2: 2 consecutive steps with nothing to train" in msg and "max_empty_steps = 2" in msg
    assert "env/verify_crash 4" in msg and "100% masked" in msg
    assert not (cfg.output_dir / "rollouts" / "step_3").exists()


async def test_a_step_without_any_nonzero_advantage_counts_as_nothing_to_train(renderer):
    """Every group with equal rewards (all 0 here, nothing masked): the step carries loss tokens but no learning
    signal, and `trainable` says so (the run loop counts such steps towards `max_empty_steps`: the test below)."""
    batch = await _one_batch(renderer, InProcessSource("zero", CycleEnv([0.0])), _cfg(batch_size=10))
    assert len(batch.rollouts) == 10 and not any(r.masked or r.filtered for r in batch.rollouts)
    assert all(r.advantage == 0.0 for r in batch.rollouts)
    m = step_metrics(batch, 1.0, 0)
    assert m["loss_tokens"] > 0 and m["trainable"] == 0 and m["reward"] == 0.0


async def test_one_group_with_a_signal_keeps_the_equal_reward_groups(renderer):
    """With one group whose rewards differ, the equal-reward group keeps its loss tokens (advantage 0, in the
    normaliser as before) unless `advantage.filter_zero` is set, and the step has something to train."""
    # group 1 (first five episodes) gets rewards 1, 0, 1, 0, 1; group 2 gets 1, 1, 1, 1, 1
    src = InProcessSource("mix", CycleEnv([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]))
    cfg = _cfg(batch_size=10, concurrency={"max_inflight": 5})
    batch = await _one_batch(renderer, src, cfg)
    m = step_metrics(batch, 1.0, 0)
    assert m["trainable"] == 5 and m["filtered_groups"] == 0 and not any(r.filtered for r in batch.rollouts)
    assert m["loss_tokens"] == sum(r.num_loss_tokens for r in batch.rollouts) > 0


async def test_mask_truncated_leaves_truncated_rollouts_out_of_the_loss_but_in_the_baseline(renderer):
    """`advantage.mask_truncated`: a rollout cut at max_completion_tokens carries no loss, and its reward still
    enters its group's baseline (hand-worked: rewards 1, 0, 1, 0, 1, mean 0.6)."""
    src = InProcessSource("mix", CycleEnv([1.0, 0.0, 1.0, 0.0, 1.0]))
    long = lambda p, k: "a long answer that runs past eight tokens" if k % 2 else "hi"  # noqa: E731
    for mask in (False, True):
        cfg = _cfg(advantage={"mask_truncated": mask})
        batch = await _one_batch(renderer, src, cfg, ScriptedClient(renderer._tokenizer, long))
        cut = [r.truncated for r in batch.rollouts]
        assert 0 < sum(cut) < 5
        assert [round(r.advantage, 6) for r in batch.rollouts] == [round(r.reward - 0.6, 6) for r in batch.rollouts]
        assert [r.filtered for r in batch.rollouts] == [mask and c for c in cut]
        m = step_metrics(batch, 1.0, 0)
        assert m["loss_tokens"] == sum(r.num_loss_tokens for r in batch.rollouts if not (mask and r.truncated))


async def test_run_with_equal_rewards_everywhere_stops_naming_the_budget(renderer, tmp_path):
    """A run whose groups all score the same (e.g. every answer cut by max_completion_tokens) stops after
    `max_empty_steps` steps, and the message names the mean reward and the completion budget; before, it ran all
    its steps saying nothing."""
    _, msg = await _run_until_no_progress(renderer, tmp_path, InProcessSource("flat", CycleEnv([0.0])))
    assert "steps 1-2: 2 consecutive steps with nothing to train" in msg and "0% masked" in msg
    assert "mean reward 0" in msg and "max_completion_tokens" in msg
    assert "0 group(s) filtered, 100% of groups with equal rewards" in msg and "converged" not in msg


async def test_a_converged_policy_stops_with_a_message_that_says_so(renderer, tmp_path):
    """Every group all right (mean reward 1): the groups have equal rewards because the policy answers each prompt
    the same way, not because the task is too hard. The message counts the equal-reward groups (it said '0 group(s)
    filtered or with equal rewards' and pointed at a too-small completion budget) and names max_empty_steps = None."""
    _, msg = await _run_until_no_progress(renderer, tmp_path, InProcessSource("solved", CycleEnv([1.0])))
    assert "steps 1-2: 2 consecutive steps with nothing to train" in msg and "mean reward 1)" in msg
    assert "0 group(s) filtered, 100% of groups with equal rewards" in msg
    assert "converged" in msg and "orchestrator.max_empty_steps = None to run on to max_steps" in msg
    assert "too hard" not in msg


async def test_eval_rollout_ids_are_distinct_across_sources(renderer, tok):
    """Sticky replica routing and per-rollout sampling seeds are keyed by rollout id: two sources with the same
    task ids must not share one (they did: `eval/<task_id>/<j>`)."""
    from prime_rl.orchestrator.eval import run_eval

    a, b = InProcessSource("a", CycleEnv([1.0], n=2)), InProcessSource("b", CycleEnv([0.0], n=2))
    client = ScriptedClient(tok, lambda p, k: "x")
    res = await run_eval([a, b], client, renderer, SamplingConfig(), AgentLimits(512, 8), num_examples=2,
                         rollouts_per_example=2)  # fmt: skip
    ids = [c["rollout_id"] for c in client.calls]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert res.by_source["a"]["avg@2"] == 1.0 and res.by_source["b"]["avg@2"] == 0.0


def test_orchestrator_exits_1_when_nothing_can_be_trained(tmp_path, monkeypatch):
    """`rl` stops the run when the orchestrator exits non-zero; NoProgressError must be one (logged, no traceback)."""
    from prime_rl.orchestrator import main as om

    async def no_progress(cfg):
        raise om.NoProgressError("steps 1-5: 5 consecutive steps with nothing to train")

    monkeypatch.setattr(om, "_main", no_progress)
    with pytest.raises(SystemExit) as e:
        om.orchestrate(OrchestratorConfig(output_dir=tmp_path / "run"))
    assert e.value.code == 1
    assert "5 consecutive steps with nothing to train" in (tmp_path / "run" / "logs" / "orchestrator.log").read_text()


async def test_seq_len_above_the_servers_context_is_refused_at_start():
    """A standalone orchestrator asks the servers for their context (vLLM lists `max_model_len` at GET /v1/models):
    the smallest one counts; a replica that does not answer is skipped."""
    from tests.inference.test_inference_client import Fake, Reply

    from prime_rl.config.orchestrator import ClientConfig
    from prime_rl.inference.client import InferenceClient
    from prime_rl.orchestrator.main import check_context_length

    models = {"data": [{"id": "m", "max_model_len": 512}]}
    fake = Fake(script=[Reply(json=models), Reply(json={"data": [{"id": "m", "max_model_len": 4096}]})] + [Reply(json=models)] * 4, dead={"c"})
    client = InferenceClient(ClientConfig(base_url=await fake.start(["a", "b", "c"])))
    try:
        assert await client.context_length() == 512
        assert [(h, p) for h, p, _ in fake.calls] == [("a", "/v1/models"), ("b", "/v1/models")]
        with pytest.raises(ValueError, match=r"seq_len = 2048 \(orchestrator.seq_len\) is above the inference "
                                             r"server's context length \(max_model_len\) = 512"):  # fmt: skip
            await check_context_length(client, 2048)
        await check_context_length(client, 512)
    finally:
        await client.aclose()
        await fake.close()


def test_rows_with_a_repeated_task_id_are_refused():
    """Rows are looked up by (split, task_id) within a source: a repeated id would seed and verify another row."""
    from prime_rl.envs.nemo_gym.rows import tasks_from_rows

    row = {"responses_create_params": {"input": [{"role": "user", "content": "hi"}]}, "task_id": "a"}
    with pytest.raises(ValueError, match="rows.jsonl: row 1: task_id 'a' repeats an earlier row's"):
        tasks_from_rows([row, dict(row)], "train", "rows.jsonl", "rows")
