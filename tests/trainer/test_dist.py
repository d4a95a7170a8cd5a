"""Collectives on the backend's device: NCCL cannot reduce CPU tensors, and the trainer reduces small CPU tensors
(micro-batch counts, step metrics) every step."""

from __future__ import annotations

import torch
import torch.distributed as dist

from prime_rl.trainer import dist as pdist


def test_collective_device_is_the_cuda_device_under_nccl_and_none_under_gloo(monkeypatch):
    monkeypatch.setattr(dist, "get_backend", lambda *a: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert pdist.collective_device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend", lambda *a: "gloo")
    assert pdist.collective_device() is None


def test_a_tensor_off_the_collective_device_is_reduced_there_and_copied_back(monkeypatch):
    seen, copied = [], []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(dist, "all_reduce", lambda t, op: seen.append((t.device, op)))
    monkeypatch.setattr(pdist, "collective_device", lambda: torch.device("meta"))  # stands for cuda under NCCL
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src: (copied.append((self.device, src.device)), self)[1])
    t = torch.zeros(2)  # a CPU tensor, as the trainer's step metrics are
    assert pdist.all_reduce_max(t) is t
    assert seen == [(torch.device("meta"), dist.ReduceOp.MAX)]  # reduced on the collective device
    assert copied == [(torch.device("cpu"), torch.device("meta"))]  # and the result copied back into t
    u = torch.zeros(2, device="meta")  # already on the collective device: reduced in place, no copy
    assert pdist.all_reduce_sum(u) is u and seen[-1] == (torch.device("meta"), dist.ReduceOp.SUM) and len(copied) == 1
