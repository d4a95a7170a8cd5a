"""Process-group setup: torchrun (env://) or a lone process (world size 1, FileStore), gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: global `rank`, `world_size`, `local_rank` and its torch `device`."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # True when `init_distributed` created the process group (and so must destroy it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join (or create) the default process group.

    Under torchrun (`RANK`/`WORLD_SIZE`/`MASTER_ADDR` set) joins with `env://`; otherwise creates a world of
    one through a temporary FileStore, so FSDP2 and torch.distributed.checkpoint take the same code path either
    way. Backend: NCCL when CUDA is available, else gloo. A group that already exists is reused.
    """
    use_cuda = torch.cuda.is_available()
    owns = False
    if not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
            if use_cuda:
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend=backend, init_method="env://")
        else:
            fd, path = tempfile.mkstemp(prefix="prime-rl-pg-")
            os.close(fd)
            os.unlink(path)
            store = dist.FileStore(path, 1)
            dist.init_process_group(backend=backend, store=store, rank=0, world_size=1)
        owns = True
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if world > 1 else 0
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=device, owns_group=owns)


def close_distributed(info: DistInfo) -> None:
    """Destroy the process group if `init_distributed` created it."""
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def collective_device() -> torch.device | None:
    """The device a collective's tensor must be on: the current CUDA device under NCCL (which cannot reduce CPU
    tensors), None under gloo (any CPU tensor will do)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def _all_reduce(tensor: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
    """Reduce `t` over all ranks in place (returned), through the backend's device when `t` is not on it; a no-op
    at world size 1."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return tensor
    dev = collective_device()
    if dev is None or tensor.device == dev:
        dist.all_reduce(tensor, op=op)
        return tensor
    on_dev = tensor.to(dev)
    dist.all_reduce(on_dev, op=op)
    return tensor.copy_(on_dev)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `t` over all ranks (in place, returned); a CPU tensor goes through the GPU under NCCL; a no-op at world
    size 1."""
    return _all_reduce(tensor, dist.ReduceOp.SUM)


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise max of `t` over all ranks (in place, returned); as `all_reduce_sum` otherwise."""
    return _all_reduce(tensor, dist.ReduceOp.MAX)


def node_name() -> str:
    """The Slurm node this process runs on (SLURMD_NODENAME), else the host name (for logs)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()
