"""`rl` end to end on the random tiny model with two digit-bandit sources of different group sizes (4 and 8) and
eval sources with their own interval, num_examples and rollouts_per_example: each step holds whole groups of each
source's size, at least batch_size rollouts and fewer than batch_size + 8; every group's advantages are its own
rewards minus its own mean; each eval source is evaluated on its own schedule with its own counts."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

pytestmark = pytest.mark.slow

SIZES = {"a": 4, "b": 8}
BATCH = 24


def test_two_sources_with_their_own_group_sizes(tmp_path):
    from tests.learning.ladder import LADDER, rl_run

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.archive import read_records, split_file
    from prime_rl.monitor.metrics import read_metrics

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    agent = {"max_turns": 1}
    train = [{"name": n, "env": {"id": "digit-bandit", "agent": agent}, "group_size": g} for n, g in SIZES.items()]
    evals = [{"name": "a", "env": {"id": "digit-bandit", "agent": agent}, "interval": 2, "num_examples": 4,
              "rollouts_per_example": 2},
             {"name": "b", "env": {"id": "digit-bandit", "agent": agent}}]  # fmt: skip
    extra = ["--max-steps", "3", "--orchestrator.batch-size", str(BATCH),
             "--orchestrator.train.source", json.dumps(train), "--orchestrator.eval.source", json.dumps(evals),
             "--orchestrator.eval.interval", "3", "--orchestrator.eval.num-examples", "3",
             "--orchestrator.eval.rollouts-per-example", "1"]  # fmt: skip
    run = tmp_path / "per-source"
    rl_run(LADDER / "digit.toml", model, run, seed=0, extra=extra, timeout_s=900)

    rows = read_metrics(run, "orchestrator")
    assert [r["step"] for r in rows] == [1, 2, 3]
    seen = set()
    for r in rows:
        records = read_records(split_file(run, r["step"], "train"))
        groups = defaultdict(list)
        for rec in records:
            groups[rec["group_id"]].append(rec)
        assert r["num_rollouts"] == len(records)
        assert BATCH <= len(records) < BATCH + max(SIZES.values())
        for members in groups.values():
            src = {m["source"] for m in members}
            assert len(src) == 1
            seen |= src
            assert len(members) == SIZES[members[0]["source"]]
            ok = [m for m in members if not m["masked"]]
            mean = sum(m["reward"] for m in ok) / len(ok) if ok else 0.0
            for m in ok:
                want = m["reward"] - mean if len(ok) >= 2 else 0.0
                assert m["advantage"] == pytest.approx(want, abs=1e-9)
    assert seen == {"a", "b"}

    def eval_rows(v):
        return [json.loads(line) for line in (run / "eval" / f"step_{v}.jsonl").read_text().splitlines()]

    # a: interval 2 -> versions 0, 2 and the final 3; b: eval.interval 3 -> 0 and 3
    assert sorted(p.name for p in (run / "eval").glob("step_*.jsonl")) == ["step_0.jsonl", "step_2.jsonl",
                                                                           "step_3.jsonl"]  # fmt: skip
    for v, want in ((0, {"a", "b"}), (2, {"a"}), (3, {"a", "b"})):
        got = eval_rows(v)
        assert {row["source"] for row in got} == want
        a = [row for row in got if row["source"] == "a"]
        b = [row for row in got if row["source"] == "b"]
        assert len(a) == 4 and all(len(row["rewards"]) == 2 for row in a)
        assert len(b) == (3 if "b" in want else 0) and all(len(row["rewards"]) == 1 for row in b)
