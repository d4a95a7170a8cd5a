"""The per-step diagnostics plot reads the right metrics.jsonl rows."""

from __future__ import annotations

from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.plots import metric_curve, plot_diagnostics


def test_diagnostics_plot_from_metrics(tmp_path):
    orch, tr = MetricsWriter(tmp_path, "orchestrator"), MetricsWriter(tmp_path, "trainer")
    for s in (1, 2, 3):
        orch.log(s, {"reward": 0.5 + 0.1 * s, "adv_abs_mean": 0.2, "zero_spread_groups_pct": 25.0})
        tr.log(s, {"entropy": 0.1, "entropy/decision": 0.4, "logp_grad_norm/pg": 1e-3, "logp_grad_norm/kl": 1e-5,
                   "grad_norm": 0.05})  # fmt: skip
    tr.log(3, {"entropy": 0.2})  # a resumed step: the last row wins
    assert metric_curve(tmp_path, "orchestrator", "reward") == [(1, 0.6), (2, 0.7), (3, 0.8)]
    assert metric_curve(tmp_path, "trainer", "entropy")[-1] == (3, 0.2)
    assert metric_curve(tmp_path, "trainer", "kl_to_start") == []  # not logged: the panel says so
    out = plot_diagnostics(tmp_path, tmp_path / "plots" / "diagnostics.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
