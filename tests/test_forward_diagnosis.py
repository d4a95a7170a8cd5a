"""examples/gridsim/forward_diagnosis.py: per-source paired difference, by month and by the first policy's score,
and the night-charging share of the submitted schedules against the optimum's, from a run's eval archive."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NIGHT = [1, 1, 0, 0, 0, 0] + [0] * 12 + [-1, -1] + [0] * 4  # charges HE01-02, sells HE19-20
DAY = [0] * 10 + [1, 1] + [0] * 6 + [-1, -1] + [0] * 4  # charges HE11-12


def _module():
    spec = importlib.util.spec_from_file_location("forward_diagnosis", REPO / "examples/gridsim/forward_diagnosis.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(source: str, task: str, reward: float, schedule: list[int] | None, masked: bool = False) -> dict:
    calls = [] if schedule is None else [
        {"id": "c", "type": "function",
         "function": {"name": "submit_schedule", "arguments": json.dumps({"schedule": schedule})}}
    ]
    return {"source": source, "task_id": task, "reward": reward, "masked": masked,
            "messages": [{"role": "user", "content": "prices"}, {"role": "assistant", "content": "", "tool_calls": calls}]}


def _archive(run: Path, step: int, records: list[dict]) -> None:
    path = run / "archive" / f"step_{step}" / "eval.jsonl.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_report_pairs_days_and_counts_night_charging(tmp_path):
    mod = _module()
    a, b, c = "gridsim-2024-05-11-HB_NORTH", "gridsim-2024-11-02-HB_WEST", "gridsim-2024-05-20-HB_SOUTH"
    _archive(tmp_path, 0, [
        _record("fwd", a, 0.9, DAY), _record("fwd", a, 0.7, DAY),  # day mean 0.8
        _record("fwd", b, 0.4, NIGHT), _record("fwd", b, 0.2, None),  # 0.3
        _record("fwd", c, 1.0, DAY), _record("fwd", c, 0.0, DAY, masked=True),  # 1.0 (masked left out)
    ])
    _archive(tmp_path, 50, [
        _record("fwd", a, 0.5, NIGHT), _record("fwd", a, 0.5, NIGHT),  # 0.5: -0.3
        _record("fwd", b, 0.9, NIGHT), _record("fwd", b, 0.9, NIGHT),  # 0.9: +0.6
        _record("fwd", c, 1.0, DAY), _record("fwd", c, 1.0, NIGHT),  # 1.0: 0
    ])
    prices = {a: [10.0] * 6 + [50.0] * 18, c: [50.0] * 10 + [5.0] * 4 + [60.0] * 10}
    text = mod.report(tmp_path, prices, night_hours=6)
    gains = [-0.3, 0.6, 0.0]
    mean = sum(gains) / 3
    se = (sum((g - mean) ** 2 for g in gains) / 2 / 3) ** 0.5
    assert f"3 days, last − first {mean:+.4f} ± {se:.4f} (1 days up, 1 down)" in text
    assert "2024-05 -0.150 2024-11 +0.600" in text
    assert "in [0.0, 0.5]: 1 days, last − first +0.6000" in text
    # valid schedules only: first eval 1 of 5 charges at night, last eval 5 of 6; May days only: 0 of 4, 3 of 4
    assert "HE01-HE06, all days: first 0.20, last 0.83" in text
    # the optimum of day a charges in the cheap night, day c's at midday: 1 of 2 (day b has no prices here)
    assert "HE01-HE06, Apr-Sep: first 0.00, last 0.75, optimum 0.50" in text


def test_report_needs_two_evals(tmp_path):
    mod = _module()
    _archive(tmp_path, 0, [_record("fwd", "gridsim-2024-05-11-HB_NORTH", 0.5, DAY)])
    with pytest.raises(SystemExit, match="holds 1 eval"):
        mod.report(tmp_path, None)
