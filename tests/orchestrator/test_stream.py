"""The task stream is deterministic, mixes sources by ratio, and resumes with outstanding tasks replayed first."""

from __future__ import annotations

from collections import Counter

from tests.orchestrator.fakes import CounterEnv, EchoEnv

from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.stream import TaskStream


def _draw(stream, n):
    return [stream.next()[2].task_id for _ in range(n)]


def test_epochs_cover_every_task_once():
    s = TaskStream([InProcessSource("c", CounterEnv(7))], seed=1)
    a, b = _draw(s, 7), _draw(s, 7)
    assert sorted(a) == sorted(b) == sorted(f"counter-train-{i}" for i in range(7)) and a != b  # reshuffled


def test_ratio_mix():
    s = TaskStream([InProcessSource("c", CounterEnv(5), ratio=3.0), InProcessSource("e", EchoEnv(5), ratio=1.0)], seed=0)
    c = Counter(t.split("-")[0] for t in _draw(s, 4000))
    assert abs(c["counter"] / 4000 - 0.75) < 0.03


def test_resume_replays_outstanding_then_continues():
    srcs = [InProcessSource("c", CounterEnv(5)), InProcessSource("e", EchoEnv(6), ratio=2.0)]
    s = TaskStream(srcs, seed=4)
    drawn = [s.next() for _ in range(9)]
    outstanding = [(i, j) for i, j, _ in drawn[6:]]  # the last 3 were drawn but not trained on
    state = s.state_dict(outstanding=outstanding)
    future = _draw(s, 20)
    t = TaskStream(srcs, seed=4)
    t.load_state_dict(state)
    assert _draw(t, 3) == [x[2].task_id for x in drawn[6:]]
    assert _draw(t, 20) == future
