"""A fake-fast environment for integration tests, loaded by the orchestrator as
`env.id = "tests.integration.fast_env:FastEnv"` (PYTHONPATH = the repository root).

Single turn, no tools, answers instantly: task i asks for a short word; reward = the fraction of the final answer's
characters that are ASCII lowercase letters (0 for no answer). A random tiny model's answers differ in that
fraction, so groups get nonzero advantages and the trainer gets a real gradient.
"""

from __future__ import annotations

import time

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult


def letter_fraction(text: str | None) -> float:
    """Share of `text`'s characters in a-z; 0.0 for None or ''."""
    if not text:
        return 0.0
    return sum("a" <= c <= "z" for c in text) / len(text)


class FastEpisode(Episode):
    def __init__(self, task: Task, delay_s: float = 0.0):
        self.task = task
        self.delay_s = delay_s

    def call_tool(self, name, arguments):
        return f"error: no tools here (called {name!r})"

    def verify(self, final_response=None):
        if self.delay_s:  # blocks the orchestrator's loop: keep it short (SIGTERM waits for it)
            time.sleep(self.delay_s)
        return VerifyResult(reward=letter_fraction(final_response))


class FastEnv(Environment):
    """`n` train and `n_eval` eval tasks with ~40-token prompts; `delay_s` seconds of scoring per rollout (to slow a
    run down, e.g. so that a test's signal reaches it before its last step)."""

    name = "fast"

    def __init__(self, n: int = 32, n_eval: int = 4, delay_s: float = 0.0):
        self.n = {"train": n, "eval": n_eval}
        self.delay_s = delay_s

    def tasks(self, split):
        if split not in self.n:
            raise KeyError(f"unknown split {split!r}; fast has train, eval")
        return [
            Task(f"fast-{split}-{i}", split, i, [{"role": "user", "content": f"Say a word ({i})."}])
            for i in range(self.n[split])
        ]

    def episode(self, task):
        return FastEpisode(task, self.delay_s)
