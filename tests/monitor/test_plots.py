"""Plots of a run: every panel written from metrics.jsonl and eval files, values checked against hand-computed
ones, the reward axis fitted to the curves (a far reference line does not squeeze it), the `prime-rl plot` command."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.plots import PANELS, draw_reward, plot_run, series, train_reward_band

plt = pytest.importorskip("matplotlib.pyplot")


def _run(tmp_path, steps=6):
    run = tmp_path / "run"
    t, o = MetricsWriter(run, "trainer"), MetricsWriter(run, "orchestrator")
    for s in range(1, steps + 1):
        t.log(s, {"loss": 0.1 / s, "entropy": 2.0 - 0.1 * s, "mismatch_kl": 1e-3 * s, "grad_norm": 0.5 + 0.01 * s,
                  "lr": 1e-4 * (1 - s / (steps + 1)), "masked_frac": 0.01 * s, "masked_frac_pos": 0.005 * s,
                  "masked_frac_neg": 0.005 * s})  # fmt: skip
        o.log(s, {"reward": 0.7 + 0.03 * s, "reward_std": 0.2, "num_rollouts": 16, "truncated_pct": 12.5,
                  "error_pct": 0.0, "max_off_policy": min(s - 1, 1)})  # fmt: skip
    (run / "eval").mkdir()
    for s, vals in ((0, [0.7, 0.8, 0.9, 0.8]), (steps, [0.85, 0.95, 0.9, 0.9])):
        (run / "eval" / f"step_{s}.jsonl").write_text("".join(json.dumps({"task_id": f"t{i}", "avg": v}) + "\n"
                                                              for i, v in enumerate(vals)))  # fmt: skip
    return run


def test_every_panel_is_written_with_its_numbers(tmp_path):
    run = _run(tmp_path)
    paths = plot_run(run)
    names = sorted(p.name for p in paths)
    assert names == sorted([f"{p.name}.png" for p in PANELS] + ["reward.png", "overview.png"])
    for p in paths:
        img = plt.imread(p)
        assert img.shape[0] > 300 and img.shape[1] > 600 and img[..., :3].std() > 0.05, p  # a real picture
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    orch = [r for r in rows if r["process"] == "orchestrator"]
    band = train_reward_band(orch)
    assert band[0] == (1, pytest.approx(0.73), pytest.approx(0.2 / 4))  # reward_std / sqrt(16)
    trunc = series(orch, "truncated_pct", 0.01)
    assert trunc[0] == (1, 0.125)


def test_resumed_step_keeps_its_last_row_and_nonfinite_is_skipped(tmp_path):
    rows = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": float("nan")}, {"step": 1, "loss": 0.5}, {"step": 3, "loss": True}]
    assert series(rows, "loss") == [(1, 0.5)]


def test_reward_axis_fits_the_curves_not_a_far_reference(tmp_path):
    run = _run(tmp_path)
    fig, ax = plt.subplots()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"orchestrator"' in x]
    assert draw_reward(ax, run, rows, references={"idle": 0.2, "greedy": 0.8})
    lo, hi = ax.get_ylim()
    assert 0.6 < lo < 0.7 and 0.9 < hi < 1.0  # fitted to train 0.73..0.88 ± 0.05 and eval means ± SE
    labels = ax.get_legend_handles_labels()[1]
    assert "idle 0.200 (below the axis)" in labels and "greedy 0.800" in labels
    eval_last = [0.85, 0.95, 0.9, 0.9]
    se = math.sqrt(sum((v - 0.9) ** 2 for v in eval_last) / 3 / 4)
    lines = [c for c in ax.containers]  # the eval errorbar
    assert lines and pytest.approx(se) == float(lines[0][2][0].get_segments()[1][1][1] - 0.9)
    plt.close(fig)


def test_prime_rl_plot_command(tmp_path):
    run = _run(tmp_path)
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "plot", str(run), "--out", str(tmp_path / "png")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "wrote 9 plots" in r.stdout and (tmp_path / "png" / "overview.png").is_file()
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "plot", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "metrics.jsonl not found" in r.stderr and "Traceback" not in r.stderr


def test_several_eval_sources_get_one_series_each(tmp_path):
    """A run evaluated on two sources (GridSim's interpolation and forward days) plots each source's own mean, not
    the mean of both."""
    from prime_rl.monitor.plots import eval_curve, eval_sources

    run = _run(tmp_path)
    for s, a, b in ((0, [0.8, 0.9], [0.4, 0.6]), (6, [0.9, 1.0], [0.5, 0.7])):
        rows = [{"source": "gridsim", "task_id": f"t{i}", "avg": v} for i, v in enumerate(a)]
        rows += [{"source": "gridsim-forward", "task_id": f"t{i}", "avg": v} for i, v in enumerate(b)]
        (run / "eval" / f"step_{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert eval_sources(run) == ["gridsim", "gridsim-forward"]
    assert [(s, round(m, 6)) for s, m, _ in eval_curve(run, "gridsim-forward")] == [(0, 0.5), (6, 0.6)]
    assert [(s, round(m, 6)) for s, m, _ in eval_curve(run, "gridsim")] == [(0, 0.85), (6, 0.95)]
    fig, ax = plt.subplots()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"orchestrator"' in x]
    assert draw_reward(ax, run, rows)
    labels = ax.get_legend_handles_labels()[1]
    assert "eval gridsim (task mean ± SE)" in labels and "eval gridsim-forward (task mean ± SE)" in labels
    means = sorted(float(c[0].get_ydata()[-1]) for c in ax.containers)
    assert means == pytest.approx([0.6, 0.95])
    plt.close(fig)
