"""GridSim's prompts, tool schema and tool result text, kept compact: a byte-level model pays for every byte.

The user prompt states the day's price order (hours from cheapest to dearest): measured, a ~1M-parameter model
learns the optimum's pattern from it in minutes, and only the average daily shape from the decimals alone
(../shared/notes/gridsim-learnability.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prime_rl.envs.gridsim.battery import HOURS, Simulation

TOOL_NAME = "submit_schedule"

SYSTEM_PROMPT = (
    "You run a 100 MWh grid battery for one day of the ERCOT day-ahead market. It holds 4 units of 25 MWh "
    "and starts empty. Each hour pick 1 (charge: buy 25 MWh at the price), -1 (sell one unit: 21.25 MWh at the "
    "price, less $2/MWh wear) or 0 (idle). Charging when full or selling when empty counts as idle. "
    f"Call {TOOL_NAME} with 24 integers, HE01 to HE24. "
    "Score: 0.2 + 0.8 x profit / best profit, clipped to [0, 1]; idle all day scores 0.2."
)

TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Submit the day's schedule; returns profit and score.",
        "parameters": {
            "type": "object",
            "properties": {
                "schedule": {
                    "type": "array",
                    "items": {"type": "integer", "enum": [-1, 0, 1]},
                    "minItems": HOURS,
                    "maxItems": HOURS,
                    "description": "HE01..HE24: 1 charge, -1 sell, 0 idle",
                }
            },
            "required": ["schedule"],
        },
    },
}


def price_order(prices: Sequence[float]) -> list[int]:
    """Hours (1-based) from cheapest to dearest; ties: earlier hour first."""
    return [h + 1 for h in sorted(range(len(prices)), key=lambda h: (prices[h], h))]


def user_prompt(date: str, point: str, prices: Sequence[float]) -> str:
    """Date, point, one `HE01 23.45` line per hour ($/MWh) and the hours from cheapest to dearest."""
    lines = [f"{date} {point}, $/MWh:"]
    lines += [f"HE{h + 1:02d} {p:.2f}" for h, p in enumerate(prices)]
    lines.append("Cheapest to dearest: " + " ".join(str(h) for h in price_order(prices)))
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
