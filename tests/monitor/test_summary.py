"""`prime-rl summary` on reference files alone (a run directory without metrics): a warning on stderr, the
references drawn as horizontal lines, and the plot titled `--title`."""

from __future__ import annotations

import json

import pytest


def _scores(path, values):
    path.write_text("".join(json.dumps({"task_id": f"t{i}", "score": v}) + "\n" for i, v in enumerate(values)))
    return path


def _capture_figures(monkeypatch) -> list:
    """The figures `plot_rewards` draws (kept open for the test)."""
    pytest.importorskip("matplotlib")
    from prime_rl.monitor import plots

    plt = plots._pyplot()
    figs: list = []
    monkeypatch.setattr(plt, "close", figs.append)
    return figs


def test_summary_of_baselines_alone_warns_and_draws_them_as_lines(tmp_path, capsys, monkeypatch):
    from prime_rl.cli.prime_rl import main

    figs = _capture_figures(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    idle, greedy = _scores(tmp_path / "idle.jsonl", [0.0, 0.2]), _scores(tmp_path / "greedy.jsonl", [0.5, 0.7])
    main(["summary", "--run", str(run), "--entry", f"idle={idle}", "--entry", f"greedy={greedy}",
          "--title", "GridSim baselines"])  # fmt: skip
    err = capsys.readouterr().err
    assert f"warning: {run} has no run metrics" in err and "(idle, greedy) alone as horizontal lines" in err
    assert (run / "plots" / "reward.png").is_file()
    (fig,) = figs
    ax = fig.axes[0]
    assert ax.get_title() == "GridSim baselines"
    ys = sorted(line.get_ydata()[0] for line in ax.get_lines())
    assert ys == pytest.approx([0.1, 0.6])  # the means of the two reference entries


def test_summary_without_references_or_metrics_writes_no_plot(tmp_path, capsys, monkeypatch):
    from prime_rl.cli.prime_rl import main

    figs = _capture_figures(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    scores = _scores(tmp_path / "a.jsonl", [0.5, 0.7])
    main(["summary", "--run", str(run), "--entry", f"model={scores}"])
    err = capsys.readouterr().err
    assert "no plot written" in err and not (run / "plots" / "reward.png").exists() and not figs
    assert (run / "eval" / "summary.md").is_file()  # the table is still written
