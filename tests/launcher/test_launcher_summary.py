"""The final eval table and the reward plot, on hand-worked numbers."""

from __future__ import annotations

import json
import math

import pytest

from prime_rl.cli.prime_rl import main
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.monitor.plots import eval_curve, plot_rewards, train_curve
from prime_rl.monitor.score_stats import mean_se, paired
from prime_rl.monitor.summary import load_scores, table


def write_rows(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_mean_se_and_paired():
    s = mean_se([0.2, 0.4, 0.6, 0.8])
    # mean 0.5; sample var = (0.09+0.01+0.01+0.09)/3 = 0.0666..; se = sqrt(0.0666../4) = 0.1290994
    assert s.mean == pytest.approx(0.5) and s.se == pytest.approx(math.sqrt(0.2 / 3 / 4))
    assert mean_se([0.7]).se == 0.0
    a = {"t1": 0.5, "t2": 0.7, "t3": 0.9, "only_a": 0.0}
    b = {"t1": 0.4, "t2": 0.5, "t3": 0.6}
    d = paired(a, b)  # differences 0.1, 0.2, 0.3 over the 3 common tasks: mean 0.2, sd 0.1, se 0.1/sqrt(3)
    assert d.count == 3 and d.mean == pytest.approx(0.2) and d.se == pytest.approx(0.1 / math.sqrt(3))


def test_table_and_cli(tmp_path, capsys):
    write_rows(tmp_path / "idle.jsonl", [{"task_id": f"t{i}", "score": 0.2} for i in range(4)])
    write_rows(tmp_path / "run/eval/step_0.jsonl", [{"step": 0, "task_id": f"t{i}", "avg": v} for i, v in
                                                    enumerate([0.1, 0.3, 0.5, 0.7])])
    write_rows(tmp_path / "run/eval/step_4.jsonl", [{"step": 4, "task_id": f"t{i}", "avg": v} for i, v in
                                                    enumerate([0.3, 0.4, 0.8, 0.9])])
    assert load_scores(tmp_path / "idle.jsonl") == {f"t{i}": 0.2 for i in range(4)}
    text = table([("idle", load_scores(tmp_path / "idle.jsonl"))])
    assert "| idle | 4 | 0.2000 ± 0.0000 | 0.2000 | 0.0% |" in text
    idle = load_scores(tmp_path / "idle.jsonl")  # a policy against itself: difference 0, SE 0, no ratio to print
    assert "| idle − same | 4 | +0.0000 ± 0.0000 | n/a (SE 0) |" in table([("idle", idle), ("same", idle)],
                                                                          [("idle", "same")])
    mw = MetricsWriter(tmp_path / "run", "orchestrator")
    for step, r in [(1, 0.3), (2, 0.4), (2, 0.45), (3, float("nan"))]:
        mw.log(step, {"reward": r})
    MetricsWriter(tmp_path / "run", "trainer").log(1, {"reward": 9.0})
    assert train_curve(tmp_path / "run") == [(1, 0.3), (2, 0.45)]  # last row of a step wins; nan and trainer skipped
    ev = eval_curve(tmp_path / "run")
    assert [s for s, _, _ in ev] == [0, 4] and ev[1][1] == pytest.approx(0.6)
    main(["summary", "--run", str(tmp_path / "run"), "--entry", f"idle={tmp_path / 'idle.jsonl'}",
          "--entry", f"SFT={tmp_path / 'run/eval/step_0.jsonl'}", "--entry", f"RL={tmp_path / 'run/eval/step_4.jsonl'}",
          "--compare", "RL:SFT"])
    md = (tmp_path / "run/eval/summary.md").read_text()
    # RL - SFT per task: 0.2, 0.1, 0.3, 0.2 -> mean 0.2, sd sqrt(0.02/3), se sqrt(0.02/3)/2 = 0.0408
    assert "| RL − SFT | 4 | +0.2000 ± 0.0408 | +4.9 |" in md
    assert "| SFT | 4 | 0.4000 ± 0.1291 | 0.4000 | 25.0% |" in md
    png = tmp_path / "run/plots/reward.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no row has a numeric"):
        write_rows(tmp_path / "bad.jsonl", [{"task_id": "x"}])
        load_scores(tmp_path / "bad.jsonl")
    plot_rewards(tmp_path / "empty", tmp_path / "empty.png")  # an empty run still plots (axes only)


def test_eval_rows_of_several_sources_need_one_chosen(tmp_path):
    """Two eval sources may share task ids: keyed by task id alone, one source's scores overwrote the other's."""
    rows = [{"source": "real", "task_id": "t0", "avg": 0.9}, {"source": "synthetic", "task_id": "t0", "avg": 0.1},
            {"source": "real", "task_id": "t1", "avg": 0.5}]
    (tmp_path / "step_0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"rows of sources \['real', 'synthetic'\]; choose one with NAME=.*#SOURCE"):
        load_scores(tmp_path / "step_0.jsonl")
    assert load_scores(tmp_path / "step_0.jsonl", "real") == {"t0": 0.9, "t1": 0.5}
    assert load_scores(tmp_path / "step_0.jsonl", "synthetic") == {"t0": 0.1}


def test_summary_without_entries_or_with_an_unknown_comparison_is_refused(tmp_path, capsys):
    """No --entry would overwrite RUN/eval/summary.md with an empty table, and a comparison naming no entry was
    skipped without a word: both are config errors naming the field, and nothing is written."""
    write_rows(tmp_path / "idle.jsonl", [{"task_id": "t0", "score": 0.2}])
    (tmp_path / "run/eval").mkdir(parents=True)
    (tmp_path / "run/eval/summary.md").write_text("the demo's table")
    for args, msg in ([], "entry: give at least one --entry NAME=PATH"), \
                     (["--entry", f"idle={tmp_path / 'idle.jsonl'}", "--compare", "RL:idle"], "compare: 'RL:idle' names ['RL']"):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(["summary", "--run", str(tmp_path / "run"), *args])
        assert e.value.code == 2 and msg in capsys.readouterr().err
    assert (tmp_path / "run/eval/summary.md").read_text() == "the demo's table"
