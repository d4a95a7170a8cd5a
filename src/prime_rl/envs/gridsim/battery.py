"""GridSim's battery: simulation of a schedule, the exact optimum by dynamic programming, and the score.

The battery: 100 MWh in 4 units of 25 MWh, 25 MW (one unit per hour), starts empty, no
end-of-day floor. Per hour the action is

- `+1` charge: buy 25 MWh at the hour's price, profit `-25 * price`;
- `-1` sell: deliver 0.85 x 25 = 21.25 MWh (85 % round trip, charged on sale) at the hour's price, minus wear of
  $2 per MWh sold, profit `21.25 * (price - 2)`;
- `0` idle.

A move the state of charge forbids (charge when full, sell when empty) is executed as idle and reported.
Prices are in $/MWh, profits in $. Works for any horizon (the task uses 24 hours; tests use short ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

UNIT_MWH = 25.0
CAPACITY_UNITS = 4
EFFICIENCY = 0.85
WEAR_PER_MWH = 2.0
SOLD_MWH = EFFICIENCY * UNIT_MWH  # 21.25 MWh delivered per unit sold
HOURS = 24
ACTIONS = (0, 1, -1)  # DP tie-break order: idle first, then charge, then sell
IDLE_SCORE = 0.2


def step_profit(action: int, price: float) -> float:
    """Profit in $ of one executed action at `price` $/MWh (no feasibility check)."""
    if action == 1:
        return -UNIT_MWH * price
    if action == -1:
        return SOLD_MWH * (price - WEAR_PER_MWH)
    return 0.0


@dataclass
class Simulation:
    """Outcome of a schedule: `profit` ($), `soc` (units after each hour, len = horizon), `executed` actions and
    `warnings` as (hour index 0-based, requested action, reason)."""

    profit: float
    soc: list[int]
    executed: list[int]
    warnings: list[tuple[int, int, str]] = field(default_factory=list)


def simulate(prices: Sequence[float], schedule: Sequence[int]) -> Simulation:
    """Run `schedule` (ints in {-1, 0, 1}, same length as `prices`) from an empty battery.

    Raises:
        ValueError: lengths differ or an action is not in {-1, 0, 1}.
    """
    if len(prices) != len(schedule):
        raise ValueError(f"schedule has {len(schedule)} actions for {len(prices)} prices")
    soc, profit = 0, 0.0
    socs: list[int] = []
    executed: list[int] = []
    warnings: list[tuple[int, int, str]] = []
    for hour, (price, action) in enumerate(zip(prices, schedule, strict=True)):
        if action not in (-1, 0, 1) or isinstance(action, bool):
            raise ValueError(f"action at hour {hour + 1} is {action!r}; must be -1, 0 or 1")
        if action == 1 and soc >= CAPACITY_UNITS:
            warnings.append((hour, action, "full"))
            action = 0
        elif action == -1 and soc <= 0:
            warnings.append((hour, action, "empty"))
            action = 0
        soc += action
        profit += step_profit(action, float(price))
        socs.append(soc)
        executed.append(action)
    return Simulation(profit=profit, soc=socs, executed=executed, warnings=warnings)


def optimal_schedule(prices: Sequence[float]) -> tuple[list[int], float]:
    """Exact optimum by dynamic programming over (hour, state of charge in units 0..4).

    `V[h][s]` = best profit from hour h on with s units stored; `V[H][s] = 0` (no end-of-day floor).
    Ties break towards idle, then charge, then sell (the order of `ACTIONS`), so the schedule is deterministic.

    Returns:
        (schedule, profit): the optimal schedule (feasible, no warnings) and its profit in $, recomputed by
        `simulate` so that scoring the optimum gives exactly 1.0.
    """
    hours = len(prices)
    value = [[0.0] * (CAPACITY_UNITS + 1) for _ in range(hours + 1)]
    choice = [[0] * (CAPACITY_UNITS + 1) for _ in range(hours)]
    for hour in range(hours - 1, -1, -1):
        price = float(prices[hour])
        nxt = value[hour + 1]
        for units in range(CAPACITY_UNITS + 1):
            best, best_a = None, 0
            for action in ACTIONS:
                s2 = units + action
                if s2 < 0 or s2 > CAPACITY_UNITS:
                    continue
                total = step_profit(action, price) + nxt[s2]
                if best is None or total > best:
                    best, best_a = total, action
            value[hour][units] = best  # type: ignore[assignment]
            choice[hour][units] = best_a
    schedule, units = [], 0
    for hour in range(hours):
        action = choice[hour][units]
        schedule.append(action)
        units += action
    return schedule, simulate(prices, schedule).profit


def optimal_profits(prices: np.ndarray) -> np.ndarray:
    """The optimal profit of many days at once: the same DP vectorised over days.

    Args:
        prices: (N, H) float array, $/MWh.
    Returns:
        (N,) float64 array of optimal profits in $ (equal to `optimal_schedule(row)[1]` up to float rounding).
    """
    prices = np.asarray(prices, dtype=np.float64)
    if prices.ndim != 2:
        raise ValueError(f"prices must be (days, hours); got shape {prices.shape}")
    n_days, hours = prices.shape
    value = np.zeros((n_days, CAPACITY_UNITS + 1))
    neg = -np.inf
    for hour in range(hours - 1, -1, -1):
        price = prices[:, hour : hour + 1]
        idle = value
        charge = np.concatenate([value[:, 1:], np.full((n_days, 1), neg)], axis=1) - UNIT_MWH * price
        sell = np.concatenate([np.full((n_days, 1), neg), value[:, :-1]], axis=1) + SOLD_MWH * (price - WEAR_PER_MWH)
        value = np.maximum(np.maximum(idle, charge), sell)
    return value[:, 0]


def score(profit: float, optimal_profit: float) -> float:
    """clip(0.2 + 0.8 * profit / optimal_profit, 0, 1): idle -> 0.2, optimum -> 1, losing 1/4 of the optimum -> 0.

    Raises:
        ValueError: `optimal_profit` <= 0 (the score is undefined; such days are not tasks).
    """
    if not optimal_profit > 0:
        raise ValueError(f"optimal profit must be > 0 to score a day; got {optimal_profit}")
    return float(min(1.0, max(0.0, IDLE_SCORE + (1.0 - IDLE_SCORE) * profit / optimal_profit)))


def validate_schedule(schedule: object, hours: int = HOURS) -> str | None:
    """None when `schedule` is a list of exactly `hours` integers in {-1, 0, 1}; else the reason (for the model)."""
    if not isinstance(schedule, list | tuple):
        return f"schedule must be a list of {hours} integers in {{-1,0,1}}, got {type(schedule).__name__}"
    if len(schedule) != hours:
        return f"schedule must have exactly {hours} entries, got {len(schedule)}"
    for i, action in enumerate(schedule):
        if isinstance(action, bool) or not isinstance(action, int) or action not in (-1, 0, 1):
            return f"HE{i + 1:02d} is {action!r}; each entry must be -1, 0 or 1"
    return None
