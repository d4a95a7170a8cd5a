"""The rollout archive: every rollout of a run equal to what was trained, readable after SIGKILL of its writer,
retention; `prime-rl rollouts` filters."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from tests.orchestrator.fakes import tiny_tokenizer
from tests.orchestrator.test_orchestrator_main import _cfg, _run

from prime_rl.cli.prime_rl import main as prime_rl
from prime_rl.config.archive import ArchiveConfig
from prime_rl.envs.base import Task
from prime_rl.monitor.archive import ArchiveTornTail, archived_steps, read_records, split_file
from prime_rl.orchestrator.archive import COMPRESSLEVEL, ArchiveWriter, append_members, json_lines
from prime_rl.orchestrator.types import Rollout, Sample

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _segments(batch):
    """(token ids, loss mask, advantage) of every packed sample with a loss token (pads have none)."""
    out = []
    for mb in batch.micro_batches:
        starts = list(np.flatnonzero(mb.position_ids == 0)) + [len(mb.input_ids)]
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            if mb.loss_mask[a:b].any():
                out.append((tuple(int(t) for t in mb.input_ids[a:b]), tuple(bool(m) for m in mb.loss_mask[a:b]),
                            float(mb.advantages[a])))  # fmt: skip
    return sorted(out)


async def test_every_rollout_of_a_3_step_run_is_archived_as_trained(tmp_path, tok):
    cfg = _cfg(tmp_path, max_steps=3, archive={"logprobs": True})
    out, seen, _, _ = await _run(cfg, tok, [1, 2, 3])
    run = cfg.output_dir
    assert archived_steps(run) == [0, 1, 2, 3]
    for step in (1, 2, 3):
        recs = read_records(split_file(run, step, "train"))
        assert len(recs) == cfg.batch_size == out[step - 1]["num_rollouts"]
        assert len({r["rollout_id"] for r in recs}) == cfg.batch_size
        assert {r["step"] for r in recs} == {step} and {r["split"] for r in recs} == {"train"}
        trained = sorted(
            (tuple(s["token_ids"]), tuple(bool(m) for m in s["loss_mask"]), float(np.float32(r["advantage"])))
            for r in recs if r["trained"] for s in r["samples"] if any(s["loss_mask"])
        )  # fmt: skip
        assert trained and trained == _segments(seen[step])
        for r in recs:
            assert r["messages"][r["prompt_messages"] - 1]["role"] == "user"
            assert any("tool_calls" in m for m in r["messages"])  # the counter task's tool call is kept
            assert len(r["samples"][0]["logprobs"]) == len(r["samples"][0]["token_ids"])
        # group rewards -> advantages as the estimator gave them (GRPO: reward minus the group mean)
        for g in {r["group_id"] for r in recs}:
            grp = [r for r in recs if r["group_id"] == g and not r["masked"]]
            mean = sum(r["reward"] for r in grp) / len(grp)
            assert all(r["advantage"] == pytest.approx(r["reward"] - mean) for r in grp)
    evals = {v: read_records(split_file(run, v, "eval")) for v in (0, 2, 3)}
    for v, recs in evals.items():
        rows = [json.loads(x) for x in (run / "eval" / f"step_{v}.jsonl").read_text().splitlines()]
        assert sorted(r["reward"] for r in recs) == sorted(x for row in rows for x in row["rewards"])
        assert len(recs) == 3 * 2 and {r["split"] for r in recs} == {"eval"}
    assert not split_file(run, 1, "eval").exists()


async def test_archive_off_writes_nothing(tmp_path, tok):
    cfg = _cfg(tmp_path, max_steps=1, eval={"interval": None}, archive={"enabled": False})
    await _run(cfg, tok, [1])
    assert not (cfg.output_dir / "archive").exists()


def _rollout(i: int, reward: float = 1.0) -> Rollout:
    task = Task(task_id=f"t{i % 3}", split="train", index=i, messages=[{"role": "user", "content": "q"}])
    r = Rollout(task=task, source="s", group_id=i // 2, reward=reward, rollout_id=f"t{i % 3}/g{i // 2}/r{i % 2}")
    r.messages = task.messages + [{"role": "assistant", "content": f"a{i}"}]
    r.samples = [Sample([1, 2, i], [False, False, True], [0.0, 0.0, -0.5])]
    return r


def test_torn_and_corrupt_tails_are_skipped_with_a_warning(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    recs = [{"i": i} for i in range(9)]
    append_members(path, recs, per_member=3)
    data = path.read_bytes()
    third = data.index(gzip.compress(b'{"i":6}\n{"i":7}\n{"i":8}\n', compresslevel=COMPRESSLEVEL, mtime=0))  # 3rd member
    path.write_bytes(data[: third + 10])  # torn inside the third member
    with pytest.warns(ArchiveTornTail, match=f"incomplete member at byte {third}"):
        assert read_records(path) == recs[:6]
    path.write_bytes(data[:third] + b"\x1f\x8b\x08garbage")
    with pytest.warns(ArchiveTornTail, match="corrupt member"):
        assert read_records(path) == recs[:6]
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_records(path) == recs


def test_values_json_cannot_hold_are_written_readably(tmp_path):
    """NaN and infinities are written as null (standard JSON), non-string keys and objects as their text; a record
    orjson refuses (an integer beyond 64 bits) is written by the standard library, and every line reads back."""
    path = tmp_path / "train.jsonl.gz"
    recs = [{"reward": float("nan"), "advantage": float("inf"), "m": {1: "a"}, "p": Path("/x/y"), "s": "é"},
            {"big": 2**70, "i": 1}, {"i": 2}]  # fmt: skip
    append_members(path, recs, per_member=2)
    assert read_records(path) == [{"reward": None, "advantage": None, "m": {"1": "a"}, "p": "/x/y", "s": "é"},
                                  {"big": 2**70, "i": 1}, {"i": 2}]  # fmt: skip
    assert json_lines([{"s": "é"}]) == '{"s":"é"}\n'.encode()  # UTF-8, not escaped


KILLED_WRITER = """
import sys
from prime_rl.orchestrator.archive import append_members
path, n = sys.argv[1], 0
while True:
    append_members(__import__("pathlib").Path(path), [{"k": n + j, "pad": "x" * 2000} for j in range(50)], per_member=50)
    n += 50
    print(n, flush=True)
"""


def test_archive_is_readable_after_sigkill_of_its_writer(tmp_path):
    path = tmp_path / "archive" / "step_1" / "train.jsonl.gz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, env=env)
    assert int(proc.stdout.readline()) == 50  # writing (one member flushed)
    while path.stat().st_size < 200_000:
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ArchiveTornTail)  # the kill may or may not land inside a member
        recs = read_records(path)
    assert len(recs) >= 50 and len(recs) % 50 == 0
    assert [r["k"] for r in recs] == list(range(len(recs)))


def test_archive_is_readable_after_sigkill_of_the_orchestrator(tmp_path):
    """A running orchestrator (fake inference and trainer, one member per rollout) killed by SIGKILL while it
    archives step 4 or later: every step before the last is complete, the last one holds whole records."""
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "tests.orchestrator.archive_kill_child", str(run)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO)  # fmt: skip
    try:
        deadline = time.monotonic() + 240  # imports transformers: slow on a loaded machine
        while not split_file(run, 4, "train").exists():
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no step 4 archived in 240 s"
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    steps = archived_steps(run)
    assert steps[:4] == [0, 1, 2, 3] or steps[:4] == [1, 2, 3, 4], steps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ArchiveTornTail)  # the kill may or may not land inside a member
        per_step = {n: read_records(split_file(run, n, "train")) for n in steps}
    for n in steps[:-1]:
        assert len(per_step[n]) == 16 and {r["step"] for r in per_step[n]} == {n}, n
    last = per_step[steps[-1]]
    assert len(last) <= 16 and all(r["step"] == steps[-1] and r["messages"] for r in last)


def test_retention_keeps_the_last_steps(tmp_path):
    w = ArchiveWriter(tmp_path, ArchiveConfig(keep_last=2))
    for step in range(1, 6):
        w.write(step, "train", [_rollout(step)])
    assert archived_steps(tmp_path) == [4, 5]
    w.write(5, "eval", [_rollout(9)])
    assert archived_steps(tmp_path) == [4, 5]
    every = ArchiveWriter(tmp_path / "all", ArchiveConfig())
    for step in range(1, 6):
        every.write(step, "train", [_rollout(step)])
    assert archived_steps(tmp_path / "all") == [1, 2, 3, 4, 5]


def test_a_rewritten_step_replaces_the_earlier_file_and_later_writes_append(tmp_path):
    ArchiveWriter(tmp_path, ArchiveConfig()).write(1, "train", [_rollout(0), _rollout(1)])
    w = ArchiveWriter(tmp_path, ArchiveConfig(flush_rollouts=1))  # a resumed run plays step 1 again
    w.write(1, "train", [_rollout(2)])
    w.write(1, "train", [_rollout(3)])
    assert [r["rollout_id"] for r in read_records(split_file(tmp_path, 1, "train"))] == ["t2/g1/r0", "t0/g1/r1"]
    rec = read_records(split_file(tmp_path, 1, "train"))[0]
    assert rec["samples"] == [{"token_ids": [1, 2, 2], "loss_mask": [0, 0, 1]}]  # no logprobs by default


def _cli(capsys, *argv, command="rollouts"):
    """(exit code, stdout, stderr) of `prime-rl COMMAND ARGV`."""
    code = 0
    try:
        prime_rl(argv=[command, *argv])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _archive(tmp_path):
    w = ArchiveWriter(tmp_path, ArchiveConfig())
    for step in (1, 2, 3):
        rs = [_rollout(i, reward=0.5 * (i % 3)) for i in range(6)]
        for r in rs:
            r.source = "a" if r.group_id < 2 else "b"
        rs[5].mask("env/timeout", "no answer")
        w.write(step, "train", rs)
    w.write(2, "eval", [_rollout(i, reward=1.0) for i in range(2)])
    return tmp_path


def test_rollouts_cli_filters(tmp_path, capsys):
    run = _archive(tmp_path)

    def ids(*argv):
        code, out, _ = _cli(capsys, str(run), "--format", "json", *argv)
        assert code == 0
        return [(r["step"], r["split"], r["rollout_id"]) for r in map(json.loads, out.splitlines())]

    assert len(ids()) == 3 * 6 + 2
    assert ids("--split", "eval") == [(2, "eval", "t0/g0/r0"), (2, "eval", "t1/g0/r1")]
    assert ids("--min-step", "2", "--max-step", "2", "--split", "train", "--source", "b") == [
        (2, "train", "t1/g2/r0"), (2, "train", "t2/g2/r1")]  # fmt: skip
    # rewards 0.5 * (i % 3): i = 2 and 5 have 1.0; 5 is masked
    assert ids("--min-reward", "1", "--split", "train", "--max-step", "1") == [(1, "train", "t2/g1/r0"),
                                                                             (1, "train", "t2/g2/r1")]  # fmt: skip
    assert ids("--max-reward", "0", "--min-step", "3") == [(3, "train", "t0/g0/r0"), (3, "train", "t0/g1/r1")]
    assert ids("--errors") == [(s, "train", "t2/g2/r1") for s in (1, 2, 3)]
    assert ids("--task-id", "t1", "--split", "train", "--min-step", "3") == [(3, "train", "t1/g0/r1"),
                                                                           (3, "train", "t1/g2/r0")]  # fmt: skip
    assert len(ids("--limit", "4")) == 4
    code, out, _ = _cli(capsys, str(run), "--format", "json", "--limit", "1", "--tokens")
    assert json.loads(out)["samples"][0]["token_ids"] == [1, 2, 0]
    assert "samples" not in json.loads(_cli(capsys, str(run), "--format", "json", "--limit", "1")[1])
    code, out, _ = _cli(capsys, str(run), "--list-steps")
    lines = out.splitlines()
    assert lines[1].split() == ["1", "6", "1", f"{(0 + 0.5 + 1 + 0 + 0.5) / 5:.4f}", "0", "0", "-"]
    assert lines[2].split()[4:] == ["2", "0", "1.0000"]
    code, out, _ = _cli(capsys, str(run), "--errors", "--limit", "1")
    assert out.startswith("== step 1 train | t2/g2/r1 | source b | task t2 | group 2 | reward 1.0")
    assert "error env/timeout: no answer" in out and "[assistant] a5" in out
    code, _, err = _cli(capsys, str(tmp_path / "nothing"))
    assert code == 2 and "no rollout archive" in err
