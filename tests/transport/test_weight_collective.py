"""The weight group (prime_rl.transport.weight_collective) on gloo between real processes: a policy version arrives
bit-exact at every receiver, a sender that stops mid-way makes the receiver raise without handing out any tensor,
and the bucket plan both sides compute from the manifest."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from prime_rl.ports import free_port
from prime_rl.transport.weight_collective import GroupSpec, WeightGroup, WeightTransferError, buckets


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(11, 6, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(5, 6, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(6, generator=g),
        "steps": torch.arange(4, dtype=torch.int64),
        "lm_head.weight": torch.randn(11, 6, generator=g),
    }


def _receiver(spec: GroupSpec, rank: int, version: int, queue) -> None:
    group = WeightGroup.open(spec, rank)
    try:
        got = group.receive(version)
        # plain lists and dtype names: no tensor storage shared with a process that may exit first
        queue.put(("ok", [(name, str(t.dtype), t.float().tolist()) for name, t in got]))
    except WeightTransferError as e:
        queue.put(("error", str(e)))


def _start(spec: GroupSpec, ranks, version: int):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_receiver, args=(spec, r, version, queue), daemon=True) for r in ranks]
    for p in procs:
        p.start()
    return procs, queue


def test_every_receiver_gets_the_version_bit_exact():
    spec = GroupSpec(f"tcp://127.0.0.1:{free_port()}", world_size=3, timeout_s=60)
    procs, queue = _start(spec, (1, 2), version=7)
    sender = WeightGroup.open(spec, 0)
    sd = state_dict()
    sent = sender.send(7, sd, bucket_bytes=200)  # several buckets: dtype changes and the size limit
    assert sent["num_tensors"] == 5 and sent["buckets"] >= 3
    assert sent["bytes"] == sum(t.numel() * t.element_size() for t in sd.values())
    for _ in procs:
        status, got = queue.get(timeout=60)
        assert status == "ok"
        assert [n for n, _, _ in got] == list(sd)
        for name, dtype, values in got:
            assert dtype == str(sd[name].dtype) and values == sd[name].float().tolist(), name
    for p in procs:
        p.join(timeout=30)
    sender.close()


def test_a_sender_that_stops_mid_way_hands_out_nothing():
    """The manifest announces two buckets; the sender broadcasts one and leaves: the receiver raises
    WeightTransferError (within the group's timeout) instead of returning the first bucket's tensors."""
    spec = GroupSpec(f"tcp://127.0.0.1:{free_port()}", world_size=2, timeout_s=20)
    procs, queue = _start(spec, (1,), version=3)
    sender = WeightGroup.open(spec, 0)
    sd = state_dict()
    half = dict(list(sd.items())[:1])
    import json

    names = list(sd)
    manifest = {"version": 3, "names": names, "dtypes": [str(sd[n].dtype).removeprefix("torch.") for n in names],
                "shapes": [list(sd[n].shape) for n in names], "bucket_bytes": 1}  # fmt: skip
    sender._store.set("manifest/3", json.dumps(manifest))
    sender._bcast(next(iter(half.values())).reshape(-1).clone())
    sender.close()
    status, message = queue.get(timeout=120)
    assert status == "error", "the receiver returned tensors of a version it did not receive in full"
    assert "version 3" in message
    procs[0].join(timeout=30)


def test_bucket_plan_splits_on_dtype_and_size():
    dtypes = ["float32", "float32", "bfloat16", "float32", "float32"]
    shapes = [[10], [10], [4], [100], [1]]
    assert buckets(dtypes, shapes, bucket_bytes=80) == [[0, 1], [2], [3], [4]]
    with pytest.raises(WeightTransferError, match="unknown dtype"):
        buckets(["float99"], [[1]], 10)


def test_group_spec_and_rank_checks():
    with pytest.raises(ValueError, match="not tcp://host:port"):
        GroupSpec("127.0.0.1:5", 2).host_port()
    with pytest.raises(ValueError, match="outside 0..1"):
        WeightGroup.open(GroupSpec("tcp://127.0.0.1:1", 2), 2)


def test_the_device_check_script_passes_on_the_cpu():
    """scripts/weight_group_check.py (run by scripts/gpu-check.sh; NCCL where two GPUs exist) on gloo."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "weight_group_check.py"
    r = subprocess.run([sys.executable, str(script), "--cpu", "--mib", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "backend gloo, cpu -> cpu" in r.stdout and r.stdout.rstrip().endswith(": ok")


def test_the_store_listens_on_the_given_address_only():
    """docs/design.md invariant 6: a loopback group's store (TCPStore alone listens on every interface) and gloo's
    own sockets are bound to 127.0.0.1."""
    import os

    import psutil

    port = free_port()
    group = WeightGroup.open(GroupSpec(f"tcp://127.0.0.1:{port}", world_size=1, timeout_s=10), 0)
    try:
        listening = [c.laddr for c in psutil.Process(os.getpid()).net_connections("tcp") if c.status == "LISTEN"]
        assert any(a.port == port for a in listening)
        assert all(a.ip == "127.0.0.1" for a in listening), listening
    finally:
        group.close()
