"""The dashboard's recent rollouts come from the rollout archive when the run has one."""

from __future__ import annotations

import json

from prime_rl.config.archive import ArchiveConfig
from prime_rl.envs.base import Task
from prime_rl.monitor.dashboard import state
from prime_rl.orchestrator.archive import ArchiveWriter
from prime_rl.orchestrator.types import Rollout


def _rollout(step: int, i: int) -> Rollout:
    task = Task(task_id=f"t{i // 4}", split="train", index=i, messages=[{"role": "user", "content": "q"}])
    r = Rollout(task=task, source="s", group_id=i // 4, reward=0.1 * i, advantage=0.5, num_turns=1,
                rollout_id=f"t{i // 4}/g{i // 4}/r{i % 4}")  # fmt: skip
    r.messages = task.messages + [{"role": "assistant", "content": f"step {step} answer {i}"}]
    if i == 1:
        r.mask("env/timeout", "slow")
    return r


def test_recent_rollouts_from_the_archive(tmp_path):
    (tmp_path / "configs").mkdir(parents=True)
    w = ArchiveWriter(tmp_path, ArchiveConfig())
    for step in range(1, 6):
        w.write(step, "train", [_rollout(step, i) for i in range(12)])  # 3 groups of 4
    w.write(5, "eval", [_rollout(5, 99)])
    rows = state(tmp_path, probe=lambda url: "?")["rollouts"]
    # the last 3 steps, newest first; 8 a step: the first rollout of each of the 3 groups, then the rest in order
    assert [r["step"] for r in rows] == [5] * 8 + [4] * 8 + [3] * 8
    assert [r["messages"][-1]["content"].split()[-1] for r in rows[:8]] == ["0", "4", "8", "1", "2", "3", "5", "6"]
    assert rows[3]["masked"] and rows[3]["error"] == "env/timeout: slow" and rows[0]["turns"] == 1
    assert rows[0]["advantage"] == 0.5 and rows[1]["task_id"] == "t1"
    json.dumps(rows, allow_nan=False)
