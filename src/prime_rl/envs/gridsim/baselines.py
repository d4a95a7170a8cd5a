"""Reference policies for GridSim: idle, greedy, optimal, random. Scored through real episodes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from prime_rl.envs.gridsim import prompts
from prime_rl.envs.gridsim.battery import CAPACITY_UNITS, HOURS, optimal_schedule
from prime_rl.envs.gridsim.env import GridSimEnv

GREEDY_UNITS = 4


def idle(prices: Sequence[float], rng: np.random.Generator) -> list[int]:
    return [0] * len(prices)


def greedy(prices: Sequence[float], rng: np.random.Generator) -> list[int]:
    """Charge in the 4 cheapest hours and sell in the 4 dearest, walking the day in order and skipping moves
    that can't be made (sell when empty, charge when full). Ties: earlier hour first; the dearest hours are
    chosen among the hours not already picked as cheapest."""
    num_hours = len(prices)
    cheap = set(sorted(range(num_hours), key=lambda h: (prices[h], h))[:GREEDY_UNITS])
    dear = set([h for h in sorted(range(num_hours), key=lambda h: (-prices[h], h)) if h not in cheap][:GREEDY_UNITS])
    out, soc = [], 0
    for hour in range(num_hours):
        action = 1 if hour in cheap else -1 if hour in dear else 0
        if (action == 1 and soc >= CAPACITY_UNITS) or (action == -1 and soc <= 0):
            action = 0
        soc += action
        out.append(action)
    return out


def optimal(prices: Sequence[float], rng: np.random.Generator) -> list[int]:
    return optimal_schedule(prices)[0]


def random(prices: Sequence[float], rng: np.random.Generator) -> list[int]:
    """Uniform over {-1, 0, 1} each hour (infeasible moves become idle when executed)."""
    return [int(a) for a in rng.integers(-1, 2, size=len(prices))]


POLICIES: dict[str, Callable[[Sequence[float], np.random.Generator], list[int]]] = {
    "idle": idle,
    "greedy": greedy,
    "optimal": optimal,
    "random": random,
}


def run_baseline(env: GridSimEnv, policy: str, split: str = "eval", seed: int = 0) -> list[dict[str, object]]:
    """Score `policy` on every task of `split` through an episode (tool call, then verify).

    Returns:
        one dict per task: task_id, score, profit, optimal_profit.
    Raises:
        KeyError: unknown policy or split.
    """
    if policy not in POLICIES:
        raise KeyError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    fn = POLICIES[policy]
    rows = []
    for task in env.tasks(split):
        ep = env.episode(task)
        rng = np.random.default_rng([seed, task.index])
        schedule = fn(ep.prices, rng)
        assert len(schedule) == HOURS
        ep.call_tool(prompts.TOOL_NAME, {"schedule": schedule})
        res = ep.verify()
        rows.append(
            {
                "task_id": task.task_id,
                "score": res.reward,
                "profit": round(res.metrics["profit"], 2),
                "optimal_profit": round(res.metrics["optimal_profit"], 2),
            }
        )
    return rows
