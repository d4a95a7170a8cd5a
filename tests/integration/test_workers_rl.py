"""`rl` end to end on real vLLM and the random tiny model (digit bandit, examples/ladder/digit.toml) with the train
rollouts played in two rollout worker processes (`[orchestrator.workers] count = 2`): the run completes, every step
trains the batch size, both workers played rollouts (the archive's `worker` field and the step metrics'
`worker_rollouts/<i>` agree), each group was played by one worker, and every rollout's policy versions stay within
the `max_async_level` bound of its step."""

from __future__ import annotations

from collections import defaultdict

import pytest

pytestmark = pytest.mark.slow

STEPS, BATCH, GROUP, ASYNC = 4, 32, 8, 2


def test_two_rollout_workers_train_full_batches_within_the_staleness_bound(tmp_path):
    from tests.learning.ladder import LADDER, rl_run

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.archive import read_records, split_file
    from prime_rl.monitor.metrics import read_metrics

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    extra = ["--max-steps", str(STEPS), "--orchestrator.batch-size", str(BATCH), "--orchestrator.max-async-level",
             str(ASYNC), "--orchestrator.workers.count", "2", "--orchestrator.eval.interval", "100"]  # fmt: skip
    run = tmp_path / "workers"
    rl_run(LADDER / "digit.toml", model, run, seed=0, extra=extra, timeout_s=1200)

    rows = read_metrics(run, "orchestrator")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["step"] for r in read_metrics(run, "trainer")] == list(range(1, STEPS + 1))
    played = defaultdict(int)
    for r in rows:
        step = r["step"]
        assert r["num_rollouts"] == BATCH
        assert 0 <= r["max_off_policy"] <= ASYNC
        records = read_records(split_file(run, step, "train"))
        assert len(records) == BATCH
        per_worker = defaultdict(int)
        groups = defaultdict(set)
        for rec in records:
            assert rec["worker"] in (0, 1), rec["rollout_id"]
            per_worker[rec["worker"]] += 1
            groups[rec["group_id"]].add(rec["worker"])
            assert rec["policy_versions"], rec["rollout_id"]
            for version in rec["policy_versions"]:  # step N samples with versions N - 1 - max_async_level .. N - 1
                assert step - 1 - ASYNC <= version <= step - 1, (step, rec["rollout_id"], rec["policy_versions"])
        assert all(len(workers) == 1 for workers in groups.values())  # a group's rollouts go to one worker
        assert len(groups) == BATCH // GROUP
        assert {k: r.get(f"worker_rollouts/{k}", 0) for k in (0, 1)} == {k: per_worker[k] for k in (0, 1)}
        for worker, count in per_worker.items():
            played[worker] += count
    assert played[0] > 0 and played[1] > 0, dict(played)
