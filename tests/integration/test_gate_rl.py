"""`rl` end to end on the random tiny model (digit bandit, examples/ladder/digit.toml) with the signal gate on:
every step trains a full batch, rejected groups are replaced by new samples, and the gate's metrics add up."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_digit_bandit_with_the_gate_trains_full_batches(tmp_path):
    from tests.learning.ladder import LADDER, rl_run

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.metrics import read_metrics

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    extra = ["--max-steps", "3", "--orchestrator.eval.interval", "100", "--orchestrator.gate.reject-uniform",
             "--orchestrator.gate.max-resample-factor", "4"]  # fmt: skip
    run = tmp_path / "gate"
    rl_run(LADDER / "digit.toml", model, run, seed=0, extra=extra, timeout_s=900)
    rows = read_metrics(run, "orchestrator")
    assert [r["step"] for r in rows] == [1, 2, 3]
    group_size = 8
    for r in rows:
        assert r["num_rollouts"] == 64
        fill = r["filtered_groups"]  # the gate is the only filter: the groups that filled a spent budget
        assert fill == 0 or r["gate/budget_spent"] == 1
        assert r["gate/extra_rollouts"] == group_size * (r["gate/rejected_groups"] - fill)
        if not r["gate/budget_spent"]:
            assert r["zero_spread_groups_pct"] == 0.0  # every trained group has a reward spread
    assert rows[-1]["gate/rejected_total"] == sum(r["gate/rejected_groups"] for r in rows)
