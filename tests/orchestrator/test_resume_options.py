"""The orchestrator's side of selective and forked resume, against test_resume_continues_task_stream (a 4-step
run, and a 2-step run checkpointed at step 2): `ckpt.resume_dir` forks the checkpoint into a new output_dir and
draws the same tasks as the uninterrupted run; `skip_dataloader` starts the task stream afresh (the tasks of a new
run's first step); `skip_progress` counts from step 1 on the checkpoint's stream; `keep_interval` keeps every N-th
checkpoint."""

from __future__ import annotations

import json

import pytest
from tests.orchestrator.test_orchestrator_main import _cfg, _run, tok  # noqa: F401 (fixture)

from prime_rl.orchestrator.checkpoint import save_orchestrator_checkpoint
from prime_rl.transport.atomic import atomic_write_dir


def _tasks(run, steps):
    out = {}
    for n in steps:
        tr = [json.loads(x) for x in (run / "rollouts" / f"step_{n}" / "traces.jsonl").read_text().splitlines()]
        out[n] = sorted(t["task_id"] for t in tr)
    return out


@pytest.fixture
async def base(tmp_path, tok):  # noqa: F811
    kw = dict(max_async_level=0, traces_per_step=8, eval={})
    await _run(_cfg(tmp_path / "a", ckpt={"interval": 2}, **kw), tok, [1, 2, 3, 4])
    await _run(_cfg(tmp_path / "b", max_steps=2, ckpt={"interval": 2}, **kw), tok, [1, 2])
    return tmp_path / "a" / "run", tmp_path / "b" / "run" / "checkpoints" / "step_2", kw


def _fork(tmp_path, name, ckpt, kw, **ck):
    cfg = _cfg(tmp_path / name, ckpt={"resume_dir": str(ckpt), **ck}, **kw)
    # the forked trainer publishes the checkpoint's policy version into the new run (trainer/rl.py)
    atomic_write_dir(cfg.output_dir / "weights" / "step_2", lambda d: (d / "x").write_bytes(b"x"))
    return cfg


async def test_resume_dir_forks_the_task_stream(tmp_path, tok, base):  # noqa: F811
    full, ckpt, kw = base
    cfg = _fork(tmp_path, "c", ckpt, kw)
    out, *_ = await _run(cfg, tok, [3, 4])
    assert len(out) == 2
    assert _tasks(cfg.output_dir, (3, 4)) == _tasks(full, (3, 4))
    assert not (ckpt.parent.parent / "rollouts" / "step_3").exists()  # the source run is left alone


async def test_skip_dataloader_starts_the_stream_afresh(tmp_path, tok, base):  # noqa: F811
    full, ckpt, kw = base
    cfg = _fork(tmp_path, "d", ckpt, kw, skip_dataloader=True)
    await _run(cfg, tok, [3, 4])
    assert _tasks(cfg.output_dir, (3,))[3] == _tasks(full, (1,))[1]  # a new stream's first draw
    assert _tasks(full, (1,))[1] != _tasks(full, (3,))[3]  # the check can fail


async def test_skip_progress_counts_from_one_on_the_checkpoint_stream(tmp_path, tok, base):  # noqa: F811
    full, ckpt, kw = base
    cfg = _fork(tmp_path, "e", ckpt, kw, skip_progress=True)
    cfg = cfg.model_copy(update={"max_steps": 2})
    await _run(cfg, tok, [1, 2])
    assert _tasks(cfg.output_dir, (1, 2)) == {1: _tasks(full, (3,))[3], 2: _tasks(full, (4,))[4]}


def test_keep_interval_keeps_every_nth_orchestrator_checkpoint(tmp_path):
    for n in range(1, 6):
        save_orchestrator_checkpoint(tmp_path, n, {"x": n}, keep_last=1, keep_interval=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_2", "step_4", "step_5"]
