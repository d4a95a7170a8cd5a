"""The simulator against measured runs (docs/results/2026-12-03-deployment-simulator.md), from recorded inputs.

`fixtures/validation.json` holds, per run, the simulator config built from what was measured apart from the
prediction (vLLM's speed alone by benchmarks/plan_inputs.py; the trainer's pass, publish and weight-load times
and the rollout shape from the run's metrics and traces) and what the run measured (step time publish to publish, off-policy lag of the traced turns,
`max_off_policy` per step). Written by `python benchmarks/plan_validation.py ... --fixture`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prime_rl.config.plan import PlanConfig
from prime_rl.simulate.report import simulate

FIXTURE = Path(__file__).parent / "fixtures" / "validation.json"
ENTRIES = json.loads(FIXTURE.read_text())

# the stated validation error (docs/scaling.md, "Planning a deployment")
STEP_TIME_REL = 0.25
OFF_POLICY_ABS = 0.10


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_prediction_within_stated_error(entry):
    res = simulate(PlanConfig.model_validate(entry["plan"]))
    measured = entry["measured"]
    assert res.step_time_s == pytest.approx(measured["step_time_s"], rel=STEP_TIME_REL)
    assert res.mean_off_policy == pytest.approx(measured["mean_off_policy"], abs=OFF_POLICY_ABS)
    mx = measured["max_off_policy"]
    assert sum(res.max_off_policy) / len(res.max_off_policy) == pytest.approx(sum(mx) / len(mx), abs=OFF_POLICY_ABS)
    # the model is deterministic: the recorded prediction is reproduced exactly
    assert res.step_time_s == pytest.approx(entry["predicted"]["step_time_s"], rel=1e-9)


def test_fixture_covers_both_workloads_and_both_levels():
    names = {e["name"] for e in ENTRIES}
    assert any(n.startswith("digit") for n in names) and any(n.startswith("gridsim") for n in names)
    assert {e["plan"]["pipeline"]["max_async_level"] for e in ENTRIES} == {0, 1}
