"""ReplicaPool: least outstanding requests, alternation when idle, stickiness per rollout, replicas marked down."""

from __future__ import annotations

import logging

import pytest

from prime_rl.inference.pool import NoReplicaLeft, ReplicaPool

A, B, C = "http://a:1", "http://b:1", "http://c:1"


def test_idle_pool_alternates_and_busy_replicas_are_avoided():
    pool = ReplicaPool([A, B, C])
    assert [pool.pick() for _ in range(6)] == [A, B, C, A, B, C]
    with pool.busy(A), pool.busy(A), pool.busy(B):
        # outstanding A=2, B=1, C=0: C first, then (C=1 ties B=1: B was picked longer ago), ...
        picks = []
        for _ in range(3):
            u = pool.pick()
            picks.append(u)
            pool.replicas[u].outstanding += 1
        assert picks == [C, B, C]
    assert {u: r.sent for u, r in pool.replicas.items()} == {A: 2, B: 1, C: 0}


def test_a_request_with_n_samples_weighs_n():
    pool = ReplicaPool([A, B])
    with pool.busy(A, samples=8), pool.busy(B), pool.busy(B):
        assert (pool.replicas[A].outstanding, pool.replicas[B].outstanding) == (8, 2)
        assert pool.pick() == B  # 2 sequences in flight on B against 8 on A
    assert (pool.replicas[A].outstanding, pool.replicas[A].sent) == (0, 1)


def test_rollouts_stick_to_their_replica_until_it_is_down(caplog):
    pool = ReplicaPool([A, B])
    first = pool.pick("r1")
    other = pool.pick("r2")
    assert first != other
    for i in range(3):
        with pool.busy(first), pool.busy(first):
            assert pool.pick("r1") == first  # its later turns stay where its prefix is cached, busy or not
            assert pool.pick(f"new{i}") == other  # a new rollout goes to the less busy replica
    with caplog.at_level(logging.WARNING, logger="prime_rl.inference.pool"):
        pool.mark_down(first, "connection refused")
        pool.mark_down(first, "again")  # logged once
    assert pool.pick("r1") == other  # moved to the replica left
    assert pool.up() == [other]
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == [f"inference replica {first} is down (connection refused); 1 of 2 replicas left: {other}"]


def test_retry_elsewhere_and_no_replica_left():
    pool = ReplicaPool([A, B])
    assert pool.pick("r", exclude={A}) == B
    with pytest.raises(NoReplicaLeft, match="no inference replica left to retry on"):
        pool.pick("r", exclude={A, B})
    pool.mark_down(A, "gone")
    pool.mark_down(B, "gone too")
    with pytest.raises(NoReplicaLeft, match=r"every inference replica is down \(http://a:1: gone; http://b:1: gone too\)"):
        pool.pick()
    with pytest.raises(ValueError, match="client.base_url is empty"):
        ReplicaPool([])
