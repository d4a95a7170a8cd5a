"""Selective and forked resume against the bit-exact resume of tests/trainer/test_trainer.py: a 6-step run, and a
run stopped after step 3 with a checkpoint there. From that checkpoint:

- `ckpt.resume_dir` (a new output_dir) continues bit-exactly: weights/step_6 equal the 6-step run's;
- with `skip_progress` too, the fork counts steps 1-3 on the data of steps 4-6 and ends on the same weights;
- `skip_scheduler`: the schedule starts again (lr of steps 4-6 = the full run's lr of steps 1-3), the step-4 loss
  (weights before the update) is unchanged;
- `skip_optimizer`: fresh AdamW, whose first update moves every weight with a gradient by lr (|m_hat / sqrt(v_hat)|
  = 1 at AdamW's first step), unlike the full run's step 4; loss and lr unchanged;
- `keep_interval` keeps every N-th checkpoint besides the newest `keep_last`.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from tests.trainer.helpers import make_samples, trainer_config, write_stream

from prime_rl.config.base import CheckpointConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import rl

SCHED = {"type": "cosine", "warmup_steps": 2, "min_lr_ratio": 0.1}


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """(full run dir, stream, split run's checkpoints/step_3) — as in test_resume_is_bit_exact."""
    samples = make_samples(tiny_model_dir, n=8, seed=0, temperature=0.9)
    stream = {s: samples[(s % 2) * 4 : (s % 2) * 4 + 4] for s in range(1, 7)}
    tmp = tmp_path_factory.mktemp("resume")
    full, split = tmp / "full", tmp / "split"
    write_stream(full, stream)
    rl.run(trainer_config(tiny_model_dir, full, max_steps=6, scheduler=SCHED))
    write_stream(split, {s: stream[s] for s in (1, 2, 3)})
    with pytest.raises(TimeoutError, match="step_4"):
        rl.run(trainer_config(tiny_model_dir, split, max_steps=6, scheduler=SCHED, ckpt={"interval": 3},
                              data_timeout_s=0.2))  # fmt: skip
    return full, stream, split / "checkpoints" / "step_3"


def _weights(run, step):
    return load_file(str(run / "weights" / f"step_{step}" / "model.safetensors"))


def _rows(run):
    return {r["step"]: r for r in read_metrics(run, "trainer")}


def test_resume_dir_forks_bit_exactly(tiny_model_dir, runs, tmp_path):
    full, stream, ckpt = runs
    fork = tmp_path / "fork"
    write_stream(fork, {s: stream[s] for s in (4, 5, 6)})
    rl.run(trainer_config(tiny_model_dir, fork, max_steps=6, scheduler=SCHED, ckpt={"resume_dir": str(ckpt)},
                          weights={"keep_last": None}))  # fmt: skip
    a, b = _weights(full, 6), _weights(fork, 6)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (fork / "weights" / "step_3" / "STABLE").is_file()  # the checkpoint's policy, for the orchestrator
    ra, rb = _rows(full), _rows(fork)
    assert sorted(rb) == [4, 5, 6] and all(ra[s]["loss"] == rb[s]["loss"] and ra[s]["lr"] == rb[s]["lr"] for s in rb)
    assert not (ckpt.parent.parent / "weights" / "step_4").exists()  # the source run is left alone


def test_skip_progress_counts_from_one_on_the_same_state(tiny_model_dir, runs, tmp_path):
    full, stream, ckpt = runs
    fork = tmp_path / "fork"
    write_stream(fork, {1: stream[4], 2: stream[5], 3: stream[6]})
    with pytest.raises(TimeoutError, match="step_4"):
        rl.run(trainer_config(tiny_model_dir, fork, max_steps=6, scheduler=SCHED, data_timeout_s=0.2,
                              ckpt={"resume_dir": str(ckpt), "skip_progress": True}))  # fmt: skip
    a, b = _weights(full, 6), _weights(fork, 3)
    assert all(torch.equal(a[k], b[k]) for k in a)
    ra, rb = _rows(full), _rows(fork)
    assert sorted(rb) == [1, 2, 3] and [rb[s]["lr"] for s in (1, 2, 3)] == [ra[s]["lr"] for s in (4, 5, 6)]


def test_skip_scheduler_restarts_the_schedule_only(tiny_model_dir, runs, tmp_path):
    full, stream, ckpt = runs
    fork = tmp_path / "fork"
    write_stream(fork, {s: stream[s] for s in (4, 5, 6)})
    rl.run(trainer_config(tiny_model_dir, fork, max_steps=6, scheduler=SCHED,
                          ckpt={"resume_dir": str(ckpt), "skip_scheduler": True}))  # fmt: skip
    ra, rb = _rows(full), _rows(fork)
    assert [rb[s]["lr"] for s in (4, 5, 6)] == [ra[s]["lr"] for s in (1, 2, 3)]
    assert [ra[s]["lr"] for s in (4, 5, 6)] != [ra[s]["lr"] for s in (1, 2, 3)]  # the check can fail
    assert rb[4]["loss"] == ra[4]["loss"]  # same weights before step 4's update
    a, b = _weights(full, 6), _weights(fork, 6)
    assert not all(torch.equal(a[k], b[k]) for k in a)


def _first_update_fraction(before, after, lr):
    """Of the weights step 4 moved, the fraction moved by lr (within 1%)."""
    d = torch.cat([(after[k].double() - before[k].double()).abs().flatten() for k in before])
    moved = d[d > 0]
    return float(((moved - lr).abs() < 0.01 * lr).double().mean())


def test_skip_optimizer_starts_adamw_afresh(tiny_model_dir, runs, tmp_path):
    full, stream, ckpt = runs
    fork = tmp_path / "fork"
    write_stream(fork, {4: stream[4]})
    rl.run(trainer_config(tiny_model_dir, fork, max_steps=4, scheduler=SCHED,
                          ckpt={"resume_dir": str(ckpt), "skip_optimizer": True}))  # fmt: skip
    ra, rb = _rows(full), _rows(fork)
    assert rb[4]["loss"] == ra[4]["loss"] and rb[4]["lr"] == ra[4]["lr"]
    before = _weights(fork, 3)  # published from the checkpoint
    split = ckpt.parent.parent
    assert all(torch.equal(before[k], _weights(split, 3)[k]) for k in before)
    assert _first_update_fraction(before, _weights(fork, 4), rb[4]["lr"]) > 0.95
    assert _first_update_fraction(before, _weights(full, 4), ra[4]["lr"]) < 0.5  # AdamW with its moments


def test_keep_interval_keeps_every_nth_checkpoint(tiny_model_dir, runs, tmp_path):
    _, stream, _ = runs
    run = tmp_path / "run"
    write_stream(run, stream)
    rl.run(trainer_config(tiny_model_dir, run, max_steps=6, ckpt={"interval": 1, "keep_last": 1, "keep_interval": 4}))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_4", "step_6"]


def test_resume_dir_must_name_a_step_folder_and_excludes_resume_step():
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        CheckpointConfig(resume_dir="outputs/a/checkpoints")
    with pytest.raises(ValueError, match="resume_dir and ckpt.resume_step both set"):
        CheckpointConfig(resume_dir="outputs/a/checkpoints/step_3", resume_step=3)
