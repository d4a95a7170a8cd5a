"""reverse-text: LCS ratio on hand-worked pairs and against brute force; tasks, episodes, demonstrations."""

from __future__ import annotations

import itertools
import random

import pytest

from prime_rl.envs import load_env
from prime_rl.envs.reverse_text.env import extract_answer, lcs_length, lcs_ratio


@pytest.mark.parametrize(
    "a,b,lcs",
    [
        ("ABCBDAB", "BDCABA", 4),  # CLRS 15.4: BCBA
        ("AGGTAB", "GXTXAYB", 4),  # GTAB
        ("abc", "abc", 3),
        ("abc", "", 0),
        ("abc", "def", 0),
        ("olleh", "hello", 2),  # "ll" (or "lo", "eo", ...)
    ],
)
def test_lcs_hand_worked(a, b, lcs):
    assert lcs_length(a, b) == lcs == lcs_length(b, a)
    assert lcs_ratio(a, b) == pytest.approx(2 * lcs / (len(a) + len(b)) if a or b else 1.0)


def test_lcs_ratio_values():
    assert lcs_ratio("", "") == 1.0
    assert lcs_ratio("ABCBDAB", "BDCABA") == pytest.approx(8 / 13)
    # LCS("abXcdYef", "cdefab") = "cdef" = 4 -> 8/14; Ratcliff/Obershelp (difflib) matches the block "ab"
    # first, then finds nothing to its right: 2 matched chars -> 4/14. The reward must be the LCS one.
    assert lcs_ratio("abXcdYef", "cdefab") == pytest.approx(8 / 14)
    assert lcs_ratio("aXbYc", "abcXY") == pytest.approx(0.6)


def brute_lcs(a: str, b: str) -> int:
    for k in range(min(len(a), len(b)), 0, -1):
        subs = {"".join(c) for c in itertools.combinations(a, k)}
        if any("".join(c) in subs for c in itertools.combinations(b, k)):
            return k
    return 0


def test_lcs_against_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(0, 8)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 8)))
        assert lcs_length(a, b) == brute_lcs(a, b), (a, b)


@pytest.fixture(scope="module")
def env():
    return load_env("reverse-text")


def test_splits_and_episode(env):
    train, ev = env.tasks("train"), env.tasks("eval")
    assert len(ev) == 100 and len(train) > 300
    assert not {t.info["text"] for t in train} & {t.info["text"] for t in ev}
    assert all(10 <= len(t.info["text"]) <= 50 for t in train + ev)
    assert [t.task_id for t in load_env("reverse-text").tasks("eval")] == [t.task_id for t in ev]
    task = ev[0]
    text = task.info["text"]
    assert task.messages[-1] == {"role": "user", "content": text} and task.tools == []
    ep = env.episode(task)
    assert ep.verify(text[::-1]).reward == 1.0 and ep.verify(text[::-1]).metrics["exact"] == 1.0
    assert ep.verify(f"<think>hmm</think>\n {text[::-1]} \n").reward == 1.0
    assert ep.verify(None).reward == 0.0
    assert ep.verify(text).reward == pytest.approx(lcs_ratio(text, text[::-1]))
    assert "no tools" in ep.call_tool("x", {})
    with pytest.raises(KeyError, match="unknown split"):
        env.tasks("test")


def test_extract_answer():
    assert extract_answer("<think>a</think>b") == "b"
    assert extract_answer(None) == ""


def test_sft_examples(env):
    ex = env.sft_examples("eval")
    assert len(ex) == 100
    m = ex[0]["messages"]
    assert m[-1]["role"] == "assistant" and m[-1]["content"] == m[1]["content"][::-1]
