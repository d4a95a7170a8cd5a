"""GridSim's prompts, tool schema and tool result text, kept compact: a byte-level model pays for every byte.

The user prompt gives each hour's price in whole $/MWh with its rank in the day inline (`HE01 28 r11`: 11th
cheapest): a small model learns the optimum's pattern when each hour's rank is inline, and only the average daily
shape from the prices alone. Cents and a
separate cheapest-to-dearest list were dropped: they cost ~160 byte tokens per sample (a quarter of the user turn)
and carry nothing the ranks do not; the exact prices stay in `task.info` and grade the schedule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prime_rl.envs.gridsim.battery import HOURS, Simulation

TOOL_NAME = "submit_schedule"

SYSTEM_PROMPT = (
    "Grid battery, one ERCOT day-ahead day: 4 units of 25 MWh, empty at start. Per hour: 1 buys 25 MWh, -1 sells "
    f"one unit (21.25 MWh, less $2/MWh wear), 0 idles. Call {TOOL_NAME} with 24 integers, HE01 to HE24. "
    "Score: 0.2 + 0.8 x profit / best profit, in [0, 1]."
)

TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Returns profit and score.",
        "parameters": {
            "type": "object",
            "properties": {
                "schedule": {
                    "type": "array",
                    "items": {"type": "integer", "enum": [-1, 0, 1]},
                    "minItems": HOURS,
                    "maxItems": HOURS,
                    "description": "1 buy, -1 sell, 0 idle",
                }
            },
            "required": ["schedule"],
        },
    },
}


def price_order(prices: Sequence[float]) -> list[int]:
    """Hours (1-based) from cheapest to dearest; ties: earlier hour first."""
    return [h + 1 for h in sorted(range(len(prices)), key=lambda h: (prices[h], h))]


def price_ranks(prices: Sequence[float]) -> list[int]:
    """Each hour's rank in the day, 1 = cheapest (the inverse of `price_order`; ties: earlier hour first)."""
    ranks = [0] * len(prices)
    for rank, hour in enumerate(price_order(prices), 1):
        ranks[hour - 1] = rank
    return ranks


def user_prompt(date: str, point: str, prices: Sequence[float]) -> str:
    """Date, point and one `HE01 23 r7` line per hour: price in $/MWh rounded to the dollar (`round`, so halves go
    to even), rank in the day (r1 cheapest, from the exact prices)."""
    lines = [f"{date} {point} $/MWh, r1 cheapest:"]
    ranks = price_ranks(prices)
    lines += [f"HE{h + 1:02d} {round(p)} r{r}" for h, (p, r) in enumerate(zip(prices, ranks, strict=True))]
    return "\n".join(lines)


def messages(date: str, point: str, prices: Sequence[float]) -> list[dict[str, Any]]:
    """The task's chat messages: system, then user."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_prompt(date, point, prices)}]


def tool_arguments(schedule: Sequence[int]) -> str:
    """Compact JSON arguments of a `submit_schedule` call: `{"schedule":[0,1,...]}`."""
    return json.dumps({"schedule": [int(a) for a in schedule]}, separators=(",", ":"))


def result_text(sim: Simulation, optimal_profit: float, score: float) -> str:
    """The tool's answer: profit, best profit, score, state of charge by hour and any feasibility warnings."""
    text = (
        f"profit {sim.profit:.2f} best {optimal_profit:.2f} score {score:.3f}\n"
        f"charge by hour: {''.join(str(s) for s in sim.soc)}"
    )
    if sim.warnings:
        text += "\nidle instead: " + " ".join(
            f"HE{h + 1:02d}({'full' if why == 'full' else 'empty'})" for h, _, why in sim.warnings
        )
    return text
