"""`prime-rl export-sft`: archived rollouts -> SFT rows; filters, top-k per task and dedup checked on a hand-made
archive, and the rows load through `sft`'s own reader."""

from __future__ import annotations

import json

import pytest

from prime_rl.cli.prime_rl import main as prime_rl
from prime_rl.monitor.archive import split_file
from prime_rl.orchestrator.archive import append_members
from prime_rl.trainer.sft_data import load_jsonl

# (step, split, task, source, answer, reward, error kind)
ROLLOUTS = [
    (1, "train", "a", "s1", "x", 1.0, None),
    (1, "train", "a", "s1", "x", 1.0, None),  # same task and completion as the first: a duplicate
    (1, "train", "a", "s1", "y", 0.5, None),
    (1, "train", "b", "s2", "x", 1.0, None),  # same completion as task a's, other task: kept
    (1, "train", "b", "s2", "z", 2.0, "env/timeout"),  # masked: never exported
    (2, "train", "a", "s1", "w", 0.8, None),
    (2, "train", "a", "s1", "x", 1.0, None),  # duplicate of step 1's; the later step is the one kept
    (2, "train", "c", "s1", "v", 0.0, None),
    (2, "eval", "a", "s1", "e", 1.0, None),
]


def _archive(run):
    by_file: dict = {}
    for i, (step, split, task, source, answer, reward, err) in enumerate(ROLLOUTS):
        rec = {"step": step, "split": split, "rollout_id": f"r{i}", "task_id": task, "source": source,
               "messages": [{"role": "user", "content": f"task {task}"}, {"role": "assistant", "content": answer}],
               "prompt_messages": 1, "tools": [{"type": "function", "function": {"name": "f"}}] if task == "b" else [],
               "reward": reward, "masked": err is not None, "error_kind": err}  # fmt: skip
        by_file.setdefault(split_file(run, step, split), []).append(rec)
    for path, recs in by_file.items():
        append_members(path, recs, per_member=2)
    return run


def _export(capsys, run, out, *argv):
    code = 0
    try:
        prime_rl(argv=["export-sft", str(run), str(out), *argv])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr()


def _ids(out):
    return [r["rollout_id"] for r in map(json.loads, out.read_text().splitlines())]


def test_filters_top_k_and_dedup(tmp_path, capsys):
    run = _archive(tmp_path / "run")
    out = tmp_path / "sft.jsonl"
    # train split, unmasked, dedup: a -> x (r6, step 2 beats r0/r1), w (r5, 0.8), y (r2, 0.5); b -> x (r3); c -> v (r7)
    code, cap = _export(capsys, run, out)
    assert code == 0 and _ids(out) == ["r6", "r5", "r2", "r3", "r7"]
    assert "5 SFT rows (3 tasks)" in cap.out
    _export(capsys, run, out, "--top-k", "1")
    assert _ids(out) == ["r6", "r3", "r7"]
    _export(capsys, run, out, "--min-reward", "0.8")
    assert _ids(out) == ["r6", "r5", "r3"]
    _export(capsys, run, out, "--max-step", "1")
    assert _ids(out) == ["r0", "r2", "r3"]  # within step 1 the tie goes to the lower rollout id
    _export(capsys, run, out, "--source", "s2")
    assert _ids(out) == ["r3"]
    _export(capsys, run, out, "--split", "all", "--min-step", "2", "--task-id", "a")
    assert _ids(out) == ["r6", "r8", "r5"]  # eval rollout e: reward 1.0 and step 2 as r6, rollout id r8 after r6
    rows = load_jsonl(out)  # what `sft` reads
    assert rows[1] == {"messages": [{"role": "user", "content": "task a"}, {"role": "assistant", "content": "e"}]}
    _export(capsys, run, out, "--source", "s2")
    assert load_jsonl(out)[0]["tools"] == [{"type": "function", "function": {"name": "f"}}]


def test_nothing_selected_and_no_archive_exit_2(tmp_path, capsys):
    run = _archive(tmp_path / "run")
    code, cap = _export(capsys, run, tmp_path / "o.jsonl", "--min-reward", "5")
    assert code == 2 and "no rollout of" in cap.err and not (tmp_path / "o.jsonl").exists()
    code, cap = _export(capsys, tmp_path / "none", tmp_path / "o.jsonl")
    assert code == 2 and "no rollout archive" in cap.err


def test_parquet(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    run = _archive(tmp_path / "run")
    out = tmp_path / "sft.parquet"
    assert _export(capsys, run, out, "--top-k", "1")[0] == 0
    from prime_rl.trainer.sft_data import load_chat_rows

    rows = load_chat_rows(path=out)
    assert [r["messages"][-1]["content"] for r in rows] == ["x", "x", "v"]
    assert rows[1]["tools"] == [{"type": "function", "function": {"name": "f"}}]
