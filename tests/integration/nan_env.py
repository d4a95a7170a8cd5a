"""The issue-13 environment: `tests.integration.fast_env`'s tasks, but the k-th episode opened in the process is
scored `REWARDS[k % 5]` = NaN, 1, 0, 1, 0.5 (whatever the answer), for `env.id = "tests.integration.nan_env:NaNEnv"`."""

from __future__ import annotations

import itertools

from tests.integration.fast_env import FastEnv, FastEpisode

from prime_rl.envs.base import VerifyResult

REWARDS = [float("nan"), 1.0, 0.0, 1.0, 0.5]


class NaNEpisode(FastEpisode):
    def __init__(self, task, reward: float):
        super().__init__(task)
        self.reward = reward

    def verify(self, final_response=None):
        return VerifyResult(reward=self.reward)


class NaNEnv(FastEnv):
    name = "nan"

    def __init__(self, n: int = 32, n_eval: int = 4):
        super().__init__(n, n_eval)
        self.count = itertools.count()

    def episode(self, task):
        return NaNEpisode(task, REWARDS[next(self.count) % len(REWARDS)])
