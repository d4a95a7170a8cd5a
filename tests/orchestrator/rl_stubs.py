"""Stubs loaded by `rl` runs in tests/orchestrator/test_admission_rl.py (PYTHONPATH = the repository root):

- `HugeEnv` (`env.id = "tests.orchestrator.rl_stubs:HugeEnv"`): FastEnv's tasks; the k-th episode opened in the
  process is scored `REWARDS[k % 5]` = 1e308, 1e39, 1, 0, 0.5 whatever the answer.
- `AlwaysErrorEnv`: FastEnv's tasks; every verify raises ConnectionError.
- `raise_on_second_call` (`advantage.import_path`): GRPO's advantages, except that its second call in the process
  raises KeyError.
"""

from __future__ import annotations

import itertools

from tests.integration.fast_env import FastEnv, FastEpisode

from prime_rl.envs.base import VerifyResult

REWARDS = [1e308, 1e39, 1.0, 0.0, 0.5]


class HugeEpisode(FastEpisode):
    def __init__(self, task, reward: float):
        super().__init__(task)
        self.reward = reward

    def verify(self, final_response=None):
        return VerifyResult(reward=self.reward)


class HugeEnv(FastEnv):
    name = "huge"

    def __init__(self, n: int = 32, n_eval: int = 4):
        super().__init__(n, n_eval)
        self.count = itertools.count()

    def episode(self, task):
        return HugeEpisode(task, REWARDS[next(self.count) % len(REWARDS)])


_calls = itertools.count(1)


def raise_on_second_call(rewards, mask, cfg):
    """Mean-centred advantages; the process's second call raises KeyError('second call')."""
    if next(_calls) == 2:
        raise KeyError("second call")
    kept = [r for r, m in zip(rewards, mask, strict=True) if m]
    mean = sum(kept) / len(kept) if kept else 0.0
    return [r - mean if m else 0.0 for r, m in zip(rewards, mask, strict=True)]


class AlwaysErrorEpisode(FastEpisode):
    def verify(self, final_response=None):
        raise ConnectionError("verifier unreachable")


class AlwaysErrorEnv(FastEnv):
    """FastEnv's tasks; every episode's verify raises ConnectionError (`env.id = "tests.orchestrator.rl_stubs:AlwaysErrorEnv"`)."""

    name = "always-error"

    def episode(self, task):
        return AlwaysErrorEpisode(task)


def alternating_advantages(rewards, mask, cfg):
    """+1, -1, +1, ... over a group's unmasked rollouts, whatever the rewards: a nonzero advantage on every step, so a
    launcher test with a model that scores 0 everywhere still trains (real optimizer updates and state to resume)."""
    out, sign = [], 1.0
    for m in mask:
        out.append(sign if m else 0.0)
        sign = -sign if m else sign
    return out
