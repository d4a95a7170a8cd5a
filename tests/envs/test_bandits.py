"""The learning ladder's bandit environments: rewards on hand-worked answers and tool calls, demonstrations."""

from __future__ import annotations

import json

import pytest

from prime_rl.envs.bandit.digit import digit_reward
from prime_rl.envs.base import load_env


def test_digit_reward_first_character():
    assert digit_reward("7", 7, 0.25) == 1.0
    assert digit_reward("  7abc", 7, 0.25) == 1.0  # leading whitespace is ignored
    assert digit_reward("3", 7, 0.25) == 0.25
    assert digit_reward("x7", 7, 0.25) == 0.0  # only the first character counts
    assert digit_reward("", 7, 0.25) == digit_reward(None, 7, 0.25) == 0.0
    assert digit_reward("٣", 7, 0.25) == 0.0  # a non-ASCII digit is not a digit answer


def test_digit_env_tasks_episode_and_demonstrations():
    env = load_env("digit-bandit", target=3, num_train=5, num_eval=2)
    assert [len(env.tasks(s)) for s in ("train", "eval")] == [5, 2]
    ep = env.episode(env.tasks("train")[0])
    assert ep.verify("3").reward == 1.0 and ep.verify("4").reward == 0.25
    assert ep.call_tool("x", {}).startswith("error")
    assert env.sft_examples()[0]["messages"][-1] == {"role": "assistant", "content": "3"}
    with pytest.raises(ValueError, match="target"):
        load_env("digit-bandit", target=12)


def test_tool_bandit_rewards_the_right_code_and_the_reported_word():
    env = load_env("tool-bandit", code=7, num_train=4, num_eval=1)
    task = env.tasks("train")[0]
    ep = env.episode(task)
    assert ep.call_tool("open_safe", {"code": 3}) == "locked"
    assert ep.verify("locked").reward == 0.0  # honest, but the safe stayed shut
    assert ep.call_tool("open_safe", json.dumps({"code": 7})) == "open"
    assert ep.verify(" Open ").reward == 1.0 and ep.verify("locked").reward == 0.0
    ep2 = env.episode(task)
    assert ep2.verify("open").reward == 0.0  # no call: claiming "open" earns nothing
    assert ep2.call_tool("open_safe", {"code": "7"}).startswith("error")  # a string is not an integer code
    assert ep2.call_tool("open_safe", {"code": True}).startswith("error")
    assert ep2.call_tool("other", {}).startswith("error")


def test_tool_bandit_demonstrations_use_random_codes_and_echo_the_reply():
    env = load_env("tool-bandit", num_train=200)
    demos = env.sft_examples("train")
    codes = [json.loads(d["messages"][2]["tool_calls"][0]["function"]["arguments"])["code"] for d in demos]
    assert set(codes) == set(range(10))  # every digit is demonstrated
    assert 0.05 < sum(c == 7 for c in codes) / len(codes) < 0.16  # ~1 in 10 opens the safe
    for d, c in zip(demos, codes, strict=True):
        reply = "open" if c == 7 else "locked"
        assert d["messages"][3]["content"] == reply and d["messages"][4]["content"] == reply
    assert demos == env.sft_examples("train")  # seeded


def test_tool_bandit_eval_safes_are_a_held_out_sample_of_the_train_safes():
    """Before, eval prompts were "Safe 0." .. "Safe 31.", a subset of the train prompts and a third of them one-digit
    numbers (4% of train): a policy at train reward 0.8 opened none of those ten eval safes."""
    env = load_env("tool-bandit", num_train=256, num_eval=32)
    number = lambda t: int(t.messages[-1]["content"].removeprefix("Safe ").removesuffix("."))  # noqa: E731
    train = [number(t) for t in env.tasks("train")]
    evals = [number(t) for t in env.tasks("eval")]
    assert len(set(train)) == 256 and len(set(evals)) == 32
    assert not set(train) & set(evals)  # held out
    assert sorted(train + evals) == list(range(288))  # one draw from one range
    assert sum(n < 10 for n in evals) < 6  # ~10/288 of 32 expected, not 10
    assert [t.task_id for t in env.tasks("eval")] == [f"safe-eval-{i}" for i in range(32)]
    assert env.tasks("eval") == load_env("tool-bandit", num_train=256, num_eval=32).tasks("eval")  # seeded
