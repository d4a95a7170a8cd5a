"""reverse-text: reverse a short text character by character; reward = LCS similarity ratio to the reversal.

Texts come from the English jokes that the `pyjokes` package ships in its wheel (no download at run time), cut at
sentence ends and then at word boundaries into pieces of 10 to 50 characters. Single turn, no tools.
"""

from __future__ import annotations

import random
import re
from functools import cached_property
from typing import Any

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult

SYSTEM_PROMPT = "Reverse the text character by character. Reply with the reversed text only."
SPLITS = ("train", "eval")
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def lcs_length(first: str, second: str) -> int:
    """Length of the longest common subsequence of `first` and `second` (O(len first * len second) time,
    O(min(len first, len second)) memory)."""
    if len(first) < len(second):
        first, second = second, first
    prev = [0] * (len(second) + 1)
    for ca in first:
        cur = [0]
        for j, cb in enumerate(second):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def lcs_ratio(first: str, second: str) -> float:
    """2 * LCS(first, second) / (len first + len second), in [0, 1]; 1.0 for two empty strings."""
    if not first and not second:
        return 1.0
    return 2.0 * lcs_length(first, second) / (len(first) + len(second))


def corpus_texts(min_len: int = 10, max_len: int = 50) -> list[str]:
    """Sorted distinct text pieces of `min_len`..`max_len` characters cut from pyjokes' English jokes.

    Raises:
        MissingExtraError: pyjokes is not installed (`pip install 'prime-rl[reverse-text]'`).
    """
    from prime_rl.extras import require

    jokes_en = require("pyjokes.jokes_en", "reverse-text", "the reverse-text environment").jokes_en

    pieces: set[str] = set()
    for joke in jokes_en["all"]:
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(joke.split())):
            cur = ""
            for word in sentence.split(" "):
                if cur and len(cur) + 1 + len(word) > max_len:
                    pieces.add(cur)
                    cur = word
                else:
                    cur = f"{cur} {word}" if cur else word
            pieces.add(cur)
    return sorted(p for p in pieces if min_len <= len(p) <= max_len and p.isascii())


def extract_answer(text: str | None) -> str:
    """The model's answer: the final text without a leading `<think>...</think>` block or outer whitespace."""
    return _THINK.sub("", text or "", count=1).strip()


class ReverseTextEpisode(Episode):
    def __init__(self, task: Task):
        self.task = task
        self.target = task.info["text"][::-1]

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        return f"error: reverse-text has no tools (got {name!r}); reply with the reversed text"

    def verify(self, final_response: str | None = None) -> VerifyResult:
        if final_response is None:
            return VerifyResult(0.0, {"exact": 0.0, "answered": 0.0})
        answer = extract_answer(final_response)
        ratio = lcs_ratio(answer, self.target)
        return VerifyResult(ratio, {"exact": float(answer == self.target), "answered": 1.0})


class ReverseTextEnv(Environment):
    """reverse-text tasks: `num_eval` texts for eval, the rest (at most `num_train`) for train, by a seeded draw.

    Args:
        seed: seed of the split draw. num_train, num_eval: split sizes. min_len, max_len: text lengths (chars).
    """

    name = "reverse-text"

    def __init__(self, seed: int = 0, num_train: int | None = None, num_eval: int = 100, min_len: int = 10,
                 max_len: int = 50):  # fmt: skip
        self.seed, self.num_train, self.num_eval = seed, num_train, num_eval
        self.min_len, self.max_len = min_len, max_len

    @cached_property
    def _splits(self) -> dict[str, list[str]]:
        texts = corpus_texts(self.min_len, self.max_len)
        random.Random(self.seed).shuffle(texts)
        ev, train = texts[: self.num_eval], texts[self.num_eval :]
        return {"train": train[: self.num_train] if self.num_train else train, "eval": ev}

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise KeyError(f"unknown split {split!r}; reverse-text has {', '.join(SPLITS)}")
        return [
            Task(
                task_id=f"reverse-text-{split}-{i}",
                split=split,
                index=i,
                messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}],
                info={"env": self.name, "text": text},
            )
            for i, text in enumerate(self._splits[split])
        ]

    def episode(self, task: Task) -> ReverseTextEpisode:
        """Raises KeyError when `task.info` has no `text` string."""
        if not isinstance((task.info or {}).get("text"), str):
            raise KeyError(f"task {task.task_id!r}: info has no 'text' string")
        return ReverseTextEpisode(task)

    def sft_examples(self, split: str = "train") -> list[dict[str, Any]]:
        return [
            {
                "messages": [*t.messages, {"role": "assistant", "content": t.info["text"][::-1]}],
                "tools": [],
                "task_id": t.task_id,
                "split": split,
            }
            for t in self.tasks(split)
        ]
