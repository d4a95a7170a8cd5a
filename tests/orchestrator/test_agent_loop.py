"""The multi-turn token path: the trained tokens are exactly the tokens sampled, prompts extend them, tools run."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from tests.orchestrator.fakes import CounterEnv, ScriptedClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import RendererConfig, SamplingConfig, SourceConfig
from prime_rl.envs.base import Task
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator import agent
from prime_rl.orchestrator.agent import AgentLimits, initial_prompt_ids, run_rollout
from prime_rl.orchestrator.sources import InProcessSource, build_source


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def renderer(tok):
    return make_renderer(tok, RendererConfig(name="qwen3", enable_thinking=False))


def _three_turn_script(prompt: str, k: int) -> str:
    return [tool_call_text("add", {"x": 2}), "ok " + tool_call_text("add", {"x": 3}), "The total is 5."][k]


def _check_token_path(sample, calls):
    """Every call's prompt + completion is a prefix of the sample; loss tokens = concatenated completions."""
    ids = sample.token_ids
    for c in calls:
        full = c["prompt_ids"] + c["completion_ids"]
        assert ids[: len(full)] == full
        start = len(c["prompt_ids"])
        assert all(sample.loss_mask[start : start + len(c["completion_ids"])])
        assert sample.logprobs[start : start + len(c["completion_ids"])] == c["logprobs"]
    sampled = [t for t, m in zip(ids, sample.loss_mask, strict=True) if m]
    assert sampled == [t for c in calls for t in c["completion_ids"]]
    assert [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m] == [lp for c in calls for lp in c["logprobs"]]
    assert all(lp == 0.0 for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if not m)


async def test_multi_turn_reproduces_sampled_tokens(tok, renderer):
    env = CounterEnv(4)
    src = InProcessSource("counter", env)
    client = ScriptedClient(tok, _three_turn_script, version=3)
    task = src.tasks("train")[2]
    r = await run_rollout(task, src, client, renderer, SamplingConfig(temperature=0.7), AgentLimits(4096, 256))
    assert not r.masked, r.error
    assert r.num_turns == 3 and len(client.calls) == 3
    assert r.reward == 1.0  # "5" = 2 + 3 reached through two real tool calls
    assert r.policy_versions == [3, 3, 3]
    assert r.prefix_breaks == 0 and len(r.samples) == 1
    assert r.temperature == 0.7
    _check_token_path(r.samples[0], client.calls)
    # The tool results sit in the prompt tokens (loss mask 0), rendered as tool responses.
    text = tok.decode(r.samples[0].token_ids)
    assert "<tool_response>\ntotal=2\n</tool_response>" in text and "total=5" in text
    # A fresh re-render would differ ("ok " + call re-renders as "ok\n" + call): the bridge kept what was sampled.
    full = renderer.render_ids(r.messages, tools=task.tools)
    assert full[: len(r.samples[0].token_ids)] != r.samples[0].token_ids
    assert env.log == [("close", task.task_id)]


async def test_malformed_call_answered_with_error(tok, renderer):
    script = lambda p, k: ["<tool_call>\n{not json}\n</tool_call>", tool_call_text("add", {"x": 1}), "1"][k]  # noqa: E731
    env = CounterEnv(4)
    src = InProcessSource("counter", env)
    client = ScriptedClient(tok, script)
    r = await run_rollout(src.tasks("train")[1], src, client, renderer, SamplingConfig(), AgentLimits(4096, 256))
    assert not r.masked and r.malformed_tool_calls == 1 and r.num_turns == 3 and r.reward == 1.0
    assert "could not parse your tool call" in tok.decode(client.calls[1]["prompt_ids"])
    _check_token_path(r.samples[0], client.calls)


async def test_turn_cap_and_truncation(tok, renderer):
    loop = lambda p, k: tool_call_text("add", {"x": 1})  # noqa: E731 - never stops calling tools
    env = CounterEnv(4)
    src = InProcessSource("counter", env)
    src.max_turns = 3
    client = ScriptedClient(tok, loop)
    r = await run_rollout(src.tasks("train")[0], src, client, renderer, SamplingConfig(), AgentLimits(4096, 256))
    assert r.num_turns == 3 and r.turn_capped and env.episodes[0].total == 3  # last turn's call still ran
    # A per-turn budget of 5 tokens cuts the first reply: truncated, no more turns.
    client2 = ScriptedClient(tok, loop)
    r2 = await run_rollout(src.tasks("train")[0], src, client2, renderer, SamplingConfig(), AgentLimits(4096, 5))
    assert r2.truncated and r2.num_turns == 1 and r2.num_loss_tokens == 5
    # seq_len: the sample never exceeds it.
    client3 = ScriptedClient(tok, loop)
    prompt_len = len(renderer.render_ids(src.tasks("train")[0].messages, tools=[src.tasks("train")[0].tools[0]], add_generation_prompt=True))
    src.max_turns = 8
    r3 = await run_rollout(src.tasks("train")[0], src, client3, renderer, SamplingConfig(), AgentLimits(prompt_len + 100, 256))
    assert r3.truncated and all(len(s) <= prompt_len + 100 for s in r3.samples)


async def test_prefix_break_splits_samples(tok, renderer):
    class NoBridge:
        """The qwen3 renderer without its bridge: next prompts come from a full re-render."""

        def __getattr__(self, name):
            return getattr(renderer, name)

        def bridge_to_next_turn(self, *a, **k):
            return None

    # Trailing spaces before the call are dropped by parsing, so the re-render does not extend the sampled tokens.
    script = lambda p, k: ["thinking   \n\n" + tool_call_text("add", {"x": 4}), "4"][k]  # noqa: E731
    env = CounterEnv(8)
    src = InProcessSource("counter", env)
    client = ScriptedClient(tok, script)
    r = await run_rollout(src.tasks("train")[4], src, client, NoBridge(), SamplingConfig(), AgentLimits(4096, 256))
    assert not r.masked and r.reward == 1.0
    assert r.prefix_breaks == 1 and len(r.samples) == 2
    _check_token_path(r.samples[0], client.calls[:1])
    _check_token_path(r.samples[1], client.calls[1:])


async def test_env_failure_masks_and_closes(tok, renderer):
    env = CounterEnv(4, crash_on_verify=True)
    src = InProcessSource("counter", env)
    client = ScriptedClient(tok, lambda p, k: "0")
    r = await run_rollout(src.tasks("train")[0], src, client, renderer, SamplingConfig(), AgentLimits(4096, 256))
    assert r.masked and "verify_crash" in r.error and env.log == [("close", "counter-train-0")]

    class Boom(ScriptedClient):
        async def generate(self, *a, **k):
            raise ConnectionError("inference down")

    env2 = CounterEnv(4)
    src2 = InProcessSource("counter", env2)
    r2 = await run_rollout(src2.tasks("train")[0], src2, Boom(tok, None), renderer, SamplingConfig(), AgentLimits(4096, 256))
    assert r2.masked and "inference down" in r2.error and env2.log == [("close", "counter-train-0")]


def test_seeded_sampling_differs_per_rollout_and_turn():
    from prime_rl.orchestrator.agent import _turn_sampling

    base = SamplingConfig(seed=7)
    seeds = {_turn_sampling(base, f"t/g0/r{k}", turn).seed for k in range(8) for turn in range(3)}
    assert len(seeds) == 24 and _turn_sampling(base, "t/g0/r1", 2).seed == _turn_sampling(base, "t/g0/r1", 2).seed
    assert _turn_sampling(SamplingConfig(), "x", 0).seed is None


async def test_per_source_max_turns(tok, renderer):
    """Two sources of one run keep their own `env.agent.max_turns`; a source built directly has the config's
    default (8)."""
    assert InProcessSource("x", CounterEnv(1)).max_turns == 8
    loop = lambda p, k: tool_call_text("add", {"x": 1})  # noqa: E731 - never stops calling tools
    cfgs = [SourceConfig(name=f"s{m}", env={"id": "tests.orchestrator.fakes:CounterEnv", "args": {"n": 4},
                                              "agent": {"max_turns": m}}) for m in (2, 5)]
    for cfg, want in zip(cfgs, (2, 5), strict=True):
        src = build_source(cfg)
        assert src.max_turns == want
        r = await run_rollout(src.tasks("train")[0], src, ScriptedClient(tok, loop), renderer, SamplingConfig(),
                              AgentLimits(4096, 256))
        assert r.num_turns == want and r.turn_capped and src.env.episodes[0].total == want


async def test_rollout_cancelled_while_its_episode_opens_closes_it(renderer, tok):
    """Cancelled while the open (a remote seed) is in flight, the rollout still closes the episode the server made:
    the open runs to its end and is closed before the cancellation goes on (before: the session leaked)."""
    import asyncio

    live: set[int] = set()

    class SlowSeed(InProcessSource):
        async def open(self, task):
            ep = await super().open(task)
            live.add(id(ep))  # the server has the session from here on; its answer is still on the way
            await asyncio.sleep(0.3)
            closing = ep.close

            async def close():
                live.discard(id(ep))
                await closing()

            ep.close = close
            return ep

    src = SlowSeed("counter", CounterEnv(8))
    rollout = asyncio.ensure_future(run_rollout(src.tasks("train")[0], src, ScriptedClient(tok, lambda p, k: "1"),
                                                renderer, SamplingConfig(), AgentLimits(4096, 16)))  # fmt: skip
    await asyncio.sleep(0.1)
    rollout.cancel()
    with pytest.raises(asyncio.CancelledError):
        await rollout
    assert live == set()


class _NamedRenderer:
    """A renderer stand-in whose first prompt is its name followed by the last message's text, as code points."""

    def __init__(self, name: str):
        self.name = name

    def render_ids(self, messages, tools=None, add_generation_prompt=False):
        return [ord(c) for c in self.name + messages[-1]["content"]]


def _first_task(text: str) -> Task:
    return Task("train-0", "train", 0, [{"role": "user", "content": text}])


def _codes(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_first_prompt_cache_tells_apart_tasks_of_one_id(monkeypatch):
    """Two sources of one name (two test cases, an eval rerun) with their own `train-0`: each task's own prompt."""
    monkeypatch.setattr(agent, "_PROMPT_CACHE", OrderedDict())
    renderer = _NamedRenderer("a")
    assert initial_prompt_ids(renderer, _first_task("weather?"), "nemo") == _codes("aweather?")
    assert initial_prompt_ids(renderer, _first_task("add 1 then add 2"), "nemo") == _codes("aadd 1 then add 2")
    assert initial_prompt_ids(renderer, _first_task("weather?"), "nemo") == _codes("aweather?")


def test_first_prompt_cache_is_not_fooled_by_a_reused_renderer_id(monkeypatch):
    """A renderer made after another was freed often gets its id(); it must still render its own prompts, not get
    the freed renderer's from the cache."""
    monkeypatch.setattr(agent, "_PROMPT_CACHE", OrderedDict())
    task = _first_task("x")
    reused = 0
    for _ in range(50):
        first = _NamedRenderer("a")
        freed = id(first)
        assert initial_prompt_ids(first, task, "nemo") == _codes("ax")
        del first
        second = _NamedRenderer("b")
        reused += id(second) == freed
        assert initial_prompt_ids(second, task, "nemo") == _codes("bx")
        del second
    assert reused  # CPython hands a freed object's memory to the next object of its size: the case happened
