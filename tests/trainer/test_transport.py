"""Round trip of the trainer's input format (`prime_rl.transport.batch`)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from prime_rl.transport.batch import (
    FIELDS,
    BatchFormatError,
    MicroBatch,
    StepBatch,
    decode_batch,
    encode_batch,
    read_batch,
    wait_for_batch,
    write_batch,
)


def _batch() -> StepBatch:
    rng = np.random.default_rng(1)
    mbs = []
    for n in (5, 3):
        mbs.append(
            MicroBatch(
                input_ids=rng.integers(0, 1000, n),
                position_ids=np.arange(n),
                loss_mask=rng.random(n) > 0.5,
                advantages=rng.normal(size=n),
                inference_logprobs=-rng.random(n),
                temperature=np.full(n, 0.7),
            )
        )
    return StepBatch(step=4, rank=1, world_size=2, total_loss_tokens=9, micro_batches=mbs, metrics={"reward": 0.5})


def test_round_trip_file(tmp_path):
    b = _batch()
    path = tmp_path / "rollouts" / "step_4" / "rank_1.bin"
    write_batch(path, b)
    got = read_batch(path)
    assert (got.step, got.rank, got.world_size, got.total_loss_tokens, got.metrics) == (4, 1, 2, 9, {"reward": 0.5})
    assert len(got.micro_batches) == 2
    for a, c in zip(b.micro_batches, got.micro_batches, strict=True):
        for name, dtype in FIELDS.items():
            assert getattr(c, name).dtype == np.dtype(dtype)
            np.testing.assert_array_equal(getattr(a, name), getattr(c, name))
    assert [p.name for p in path.parent.iterdir()] == ["rank_1.bin"]  # no temporary left behind


def test_bad_version_and_missing_field_are_named():
    obj = msgpack.unpackb(encode_batch(_batch()), raw=False)
    obj["version"] = 99
    with pytest.raises(BatchFormatError, match="version 99"):
        decode_batch(msgpack.packb(obj), source="x.bin")
    obj["version"] = 1
    del obj["micro_batches"][1]["advantages"]
    with pytest.raises(BatchFormatError, match=r"micro_batches\[1\] lacks field 'advantages'"):
        decode_batch(msgpack.packb(obj), source="x.bin")


def test_wait_for_batch_timeout_names_file(tmp_path):
    with pytest.raises(TimeoutError, match="rank_0.bin"):
        wait_for_batch(tmp_path / "rollouts" / "step_1" / "rank_0.bin", timeout_s=0.1)
