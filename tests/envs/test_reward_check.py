"""The one reward check (`prime_rl.envs.base.reward_problem` / `finite_metrics`): bounds, types, metrics; and the
NeMo Gym resources server scoring through it (a bool reward masked, one bad metric dropped, not the episode)."""

from __future__ import annotations

import pytest

from prime_rl.envs.base import (
    DEFAULT_REWARD_RANGE,
    Environment,
    Episode,
    Task,
    VerifyResult,
    finite_metrics,
    reward_problem,
)
from prime_rl.envs.nemo_gym.server import _verdict
from prime_rl.envs.nemo_gym.sessions import Session, SessionStore


@pytest.mark.parametrize(
    ("reward", "problem"),
    [
        (0.5, None),
        (-3, None),
        (1e6, None),
        (-1e6, None),
        (1e308, "reward 1e+308 outside [-1e+06, 1e+06]"),
        (1e39, "reward 1e+39 outside [-1e+06, 1e+06]"),
        (-1000000.5, "reward -1000000.5 outside [-1e+06, 1e+06]"),
        (float("nan"), "reward nan"),
        (float("inf"), "reward inf"),
        (True, "reward True (bool)"),
        (None, "reward None (NoneType)"),
        ("0.7", "reward '0.7' (str)"),
    ],
)
def test_reward_problem_hand_worked(reward, problem):
    assert reward_problem(reward) == problem


def test_reward_range_is_configurable_and_optional():
    assert DEFAULT_REWARD_RANGE == (-1e6, 1e6)
    assert reward_problem(5e6, reward_range=(-1e7, 1e7)) is None
    assert reward_problem(5.0, reward_range=(0.0, 1.0)) == "reward 5.0 outside [0, 1]"
    assert reward_problem(1e308, reward_range=None) is None  # type and finiteness only
    assert reward_problem(float("nan"), reward_range=None) == "reward nan"


def test_finite_metrics_drops_only_the_bad_entries():
    got = finite_metrics({"a": 1, "b": "x", "c": float("nan"), "d": True, "e": 2.5, "f": None, "g": float("-inf")})
    assert got == {"a": 1.0, "e": 2.5}
    assert finite_metrics(["not", "a", "dict"]) == {}


class _Ep(Episode):
    def __init__(self, result):
        self.result = result

    def call_tool(self, name, arguments):
        return "ok"

    def verify(self, final_response=None):
        return self.result


def _score(result) -> dict:
    return _verdict(Session("s", _Ep(result), 0.0), "done")


@pytest.mark.parametrize(
    ("reward", "reason"),
    [
        (True, "reward True (bool)"),
        (1e308, "reward 1e+308 outside [-1e+06, 1e+06]"),
        (float("nan"), "reward nan"),
        ("1.0", "reward '1.0' (str)"),
    ],
)
def test_server_masks_a_reward_that_fails_the_check(reward, reason):
    out = _score(VerifyResult(reward=reward))
    assert out["mask_sample"] is True and out["reward"] == 0.0
    assert reason in out["failure_reason"], out


def test_server_drops_one_bad_metric_and_keeps_the_episode():
    out = _score(VerifyResult(reward=0.75, metrics={"good": 2, "bad": "n/a", "nan": float("nan")}))
    assert out["mask_sample"] is False and out["reward"] == 0.75 and out["metrics"] == {"good": 2.0}


def test_server_reward_range_comes_from_its_state():
    from prime_rl.envs.nemo_gym.server import ServerState

    class _Env(Environment):
        name = "x"

        def tasks(self, split):
            return []

        def episode(self, task: Task):
            return _Ep(VerifyResult(reward=5e6))

    wide = ServerState(env=_Env(), reward_range=(-1e7, 1e7))
    sess = Session("s", _Ep(VerifyResult(reward=5e6)), 0.0)
    assert _verdict(sess, None, wide.reward_range)["reward"] == 5e6
    assert _verdict(Session("s", _Ep(VerifyResult(reward=5e6)), 0.0), None)["mask_sample"] is True


def test_session_lookup_names_the_tombstone_once():
    store = SessionStore(4, None)
    store.add(Session("a", None, 0.0))
    found = store.lookup("a")
    assert found.session is not None and found.verified is None
    store.live["a"].result = {"reward": 1.0}
    store.end("a", "session_lost", "session was closed")
    found = store.lookup("a")
    assert found.session is None and found.verified == {"reward": 1.0} and found.kind == "session_lost"
    found = store.lookup(None)
    assert found.session is None and found.verified is None and "no valid session cookie" in found.reason
