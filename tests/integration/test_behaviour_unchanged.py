"""Behaviour unchanged: a short seeded `rl` run on the tiny model writes the same metrics.jsonl values as the code
that recorded `rl_baseline.json` (see `tests/integration/behaviour.py` for the run, the fields compared and how the
file was recorded). A change that alters training on purpose re-records the file with `--write` and says why.

Slow: one `rl` run, about 1.5-2 minutes on 2 cores (most of it vLLM start-up).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.behaviour import compare, run_once

BASELINE = Path(__file__).with_name("rl_baseline.json")


def test_compare_flags_a_changed_value():
    """The comparison itself: equal rows and last-digit float noise pass; a float outside the tolerance, a changed
    integer and a missing field are each reported."""
    rows = {"orchestrator": [{"step": 1, "reward": 0.5, "trainable": 3}], "trainer": [{"step": 1, "loss": 1.0}],
            "eval": []}
    base = {"rtol": 1e-9, "atol": 1e-12, "rows": rows}
    assert compare(base, json.loads(json.dumps(rows))) == []
    noise = json.loads(json.dumps(rows))
    noise["orchestrator"][0]["reward"] = 0.5 + 5e-17 * 2  # summation order: last digit
    assert compare(base, noise) == []
    changed = json.loads(json.dumps(rows))
    changed["orchestrator"][0]["reward"] = 0.5 + 1e-7
    changed["trainer"][0]["loss"] = 1.001
    del changed["orchestrator"][0]["trainable"]
    diffs = compare(base, changed)
    assert len(diffs) == 3 and any("reward" in d for d in diffs) and any("loss" in d for d in diffs)
    assert any("trainable" in d and "only in expected" in d for d in diffs)
    # a process's own tolerance (the trainer's fp32 numbers, which differ between machines) applies to it alone
    loose = {**base, "tolerance": {"trainer": {"rtol": 1e-2, "atol": 1e-9}}}
    diffs = compare(loose, changed)
    assert len(diffs) == 2 and not any("loss" in d for d in diffs) and any("reward" in d for d in diffs)


@pytest.mark.slow
def test_seeded_rl_run_matches_the_baseline(tmp_path):
    diffs = compare(json.loads(BASELINE.read_text()), run_once(tmp_path))
    assert not diffs, "\n".join(diffs)
