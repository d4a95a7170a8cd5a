"""GridSim battery: the DP optimum against brute force, hand-worked days, the score's anchors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prime_rl.envs.gridsim.baselines import greedy
from prime_rl.envs.gridsim.battery import (
    optimal_profits,
    optimal_schedule,
    score,
    simulate,
    validate_schedule,
)


def brute_force(prices, feasible_only=False):
    """Best profit over all 3^k schedules, simulated independently of `simulate` (a second implementation)."""
    best = -np.inf
    for sched in itertools.product((-1, 0, 1), repeat=len(prices)):
        soc, profit, feasible = 0, 0.0, True
        for p, a in zip(prices, sched, strict=True):
            if (a == 1 and soc == 4) or (a == -1 and soc == 0):
                feasible = False
                a = 0
            soc += a
            profit += -25.0 * p if a == 1 else (0.85 * 25.0 * p - 2.0 * 0.85 * 25.0 if a == -1 else 0.0)
        if feasible_only and not feasible:
            continue
        best = max(best, profit)
    return best


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 9, 10])
def test_dp_equals_brute_force(k):
    rng = np.random.default_rng(k)
    days = 3 if k <= 9 else 1
    for _ in range(days):
        prices = np.round(rng.normal(30, 25, size=k), 2)  # includes negative prices
        sched, profit = optimal_schedule(prices)
        bf = brute_force(prices)
        assert profit == pytest.approx(bf, abs=1e-9)
        assert brute_force(prices, feasible_only=True) == pytest.approx(bf, abs=1e-9)
        assert optimal_profits(prices[None, :])[0] == pytest.approx(bf, abs=1e-9)
        assert simulate(prices, sched).warnings == []


def test_hand_worked_day():
    # buy 25 MWh at $10 (-250), sell 21.25 MWh at $50 less $2 wear: 21.25 * 48 = 1020 -> profit 770
    sched, profit = optimal_schedule([10.0, 50.0])
    assert sched == [1, -1]
    assert profit == pytest.approx(770.0)
    # negative price: charging earns money; selling at $1 loses (1 - 2) * 21.25, so keep the charge
    sched, profit = optimal_schedule([-10.0, 1.0])
    assert sched == [1, 0] and profit == pytest.approx(250.0)
    # spread too small for 85 % efficiency: 21.25 * (11 - 2) = 191.25 < 250 -> idle is optimal
    assert optimal_schedule([10.0, 11.0]) == ([0, 0], 0.0)


def test_infeasible_moves_are_idle_with_warnings():
    sim = simulate([10.0] * 6, [-1, 1, 1, 1, 1, 1])
    assert sim.executed == [0, 1, 1, 1, 1, 0]
    assert sim.soc == [0, 1, 2, 3, 4, 4]
    assert [(h, why) for h, _, why in sim.warnings] == [(0, "empty"), (5, "full")]
    assert sim.profit == pytest.approx(-4 * 250.0)


def test_score_anchors():
    opt = 1234.5
    assert score(0.0, opt) == 0.2
    assert score(opt, opt) == 1.0
    assert score(-0.25 * opt, opt) == 0.0
    assert score(-10 * opt, opt) == 0.0
    assert score(0.5 * opt, opt) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="optimal profit"):
        score(1.0, 0.0)


def test_optimum_scores_exactly_one_on_random_days():
    rng = np.random.default_rng(0)
    prices = np.round(rng.lognormal(3.3, 0.6, size=(200, 24)) - 3, 2)
    vec = optimal_profits(prices)
    for day, v in zip(prices, vec, strict=True):
        sched, profit = optimal_schedule(day)
        assert profit == pytest.approx(v, rel=1e-12, abs=1e-9)
        if profit > 0:
            assert score(simulate(day, sched).profit, profit) == 1.0
        # no feasible single-move change beats the optimum
        for h in range(24):
            for a in (-1, 0, 1):
                alt = list(sched)
                alt[h] = a
                assert simulate(day, alt).profit <= profit + 1e-9


@pytest.mark.parametrize(
    "bad",
    [None, "0" * 24, [0] * 23, [0] * 25, [0] * 23 + [2], [0] * 23 + [True], [0] * 23 + [1.0], [0] * 23 + ["1"]],
)
def test_validate_schedule_rejects(bad):
    assert validate_schedule(bad) is not None


def test_validate_schedule_accepts():
    assert validate_schedule([1, -1, 0] * 8) is None


def test_greedy_hand_worked():
    prices = [float(p) for p in [5, 1, 2, 3, 4, 50, 60, 70, 80, 40] + [20] * 14]
    # cheapest: HE02..HE05 (1,2,3,4); dearest: HE06..HE09 (50,60,70,80)
    assert greedy(prices, None)[:10] == [0, 1, 1, 1, 1, -1, -1, -1, -1, 0]
    # a sell before any charge is skipped
    prices = [100.0, 1.0, 2.0, 3.0, 4.0, 90.0, 80.0, 70.0] + [20.0] * 16
    assert greedy(prices, None)[:8] == [0, 1, 1, 1, 1, -1, -1, -1]
