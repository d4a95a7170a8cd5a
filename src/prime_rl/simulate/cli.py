"""`prime-rl plan`: simulate the configured deployment and print the prediction, or print the capacity table."""

from __future__ import annotations

import json

from prime_rl.config.plan import PlanConfig


def run(cfg: PlanConfig) -> None:
    """Print the prediction for `cfg` (or, with `capacity`, the 4B-model capacity table); write `json_out` if set."""
    if cfg.capacity:
        from prime_rl.simulate.capacity import capacity_table, format_table

        rows = capacity_table(seed=cfg.seed)
        print(format_table(rows))
        payload: object = [row.to_dict() for row in rows]
    else:
        from prime_rl.simulate.report import format_result, simulate

        res = simulate(cfg)
        print(format_result(cfg, res))
        payload = {"config": cfg.model_dump(mode="json"), "result": res.to_dict()}
    if cfg.json_out is not None:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_out.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"written {cfg.json_out}")
