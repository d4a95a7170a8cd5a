"""Policy versions over a collective: the trainer broadcasts each version's full state dict to the inference workers.

A process group of its own, separate from the trainer's (FSDP) group and from vLLM's tensor-parallel group: rank 0
is the trainer's rank 0, ranks 1..N the inference workers (server i's worker w has rank `rank_offset_i + w`). The
rendezvous is a `torch.distributed.TCPStore` that the trainer hosts at `tcp://host:port`; the backend follows the
device: gloo for CPU tensors, NCCL for CUDA tensors (one code path; `backend_for`).

One version on the wire (`WeightGroup.send` / `WeightGroup.receive`):
1. the sender writes a JSON manifest (version, names, dtypes, shapes) into the store under `manifest/<version>`;
2. each receiver reads it (waiting for it up to the group's timeout) and allocates the buckets it describes;
3. the tensors travel as flat per-dtype buckets of at most `bucket_bytes`, one broadcast per bucket, in manifest order.
A receiver returns the tensors only once every bucket arrived: a sender that stops mid-way (or a timeout) raises
`WeightTransferError` and nothing is handed to the model, so no update is ever applied half (docs/design.md
invariant 4 holds for this transport as for files). A group whose transfer failed is closed; the next version needs a
new group (both sides re-open it). No pickle crosses the wire: the manifest is JSON, the payload raw tensor bytes.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import torch
import torch.distributed as dist

DEFAULT_BUCKET_BYTES = 256 * 2**20  # one broadcast carries at most this many bytes (a single larger tensor: itself)
STORE_PREFIX = "prime_rl_weights"


class WeightTransferError(RuntimeError):
    """A version could not be sent or received in full (peer gone, timeout, manifest mismatch); nothing was applied."""


@dataclass(frozen=True)
class GroupSpec:
    """Where and how to join: `address` = `tcp://host:port` of the trainer's store, `world_size` = 1 + the number of
    inference workers, `timeout_s` = how long joining or one transfer may wait for the other ranks."""

    address: str
    world_size: int
    timeout_s: float = 600.0

    def host_port(self) -> tuple[str, int]:
        """(host, port) of `address`; ValueError names a malformed one."""
        parts = urlsplit(self.address)
        if parts.scheme != "tcp" or not parts.hostname or parts.port is None:
            raise ValueError(f"weight group address {self.address!r} is not tcp://host:port")
        return parts.hostname, parts.port


def backend_for(device: torch.device) -> str:
    """`nccl` for a CUDA device, `gloo` otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def _dtype(name: str) -> torch.dtype:
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise WeightTransferError(f"manifest names an unknown dtype {name!r}")
    return value


def buckets(dtypes: list[str], shapes: list[list[int]], bucket_bytes: int) -> list[list[int]]:
    """Split tensor indices (manifest order) into runs of one dtype holding at most `bucket_bytes` each (a tensor
    larger than that is a bucket alone). Sender and receivers compute it from the same manifest."""
    out: list[list[int]] = []
    size = 0
    for i, (dname, shape) in enumerate(zip(dtypes, shapes, strict=True)):
        nbytes = _dtype(dname).itemsize * int(torch.Size(shape).numel())
        if not out or dtypes[out[-1][0]] != dname or size + nbytes > bucket_bytes:
            out.append([])
            size = 0
        out[-1].append(i)
        size += nbytes
    return out


class WeightGroup:
    """One member of the weight-transfer group. `open` joins it (blocking until all `world_size` ranks joined or
    `timeout_s` passed: WeightTransferError); rank 0 hosts the store and is the only sender."""

    def __init__(self, spec: GroupSpec, rank: int, device: torch.device, store, group):
        self.spec, self.rank, self.device = spec, rank, torch.device(device)
        self._store, self._group = store, group

    @classmethod
    def open(cls, spec: GroupSpec, rank: int, device: torch.device | str = "cpu") -> WeightGroup:
        """Join as `rank` (0 = the trainer, hosting the TCPStore at `spec.address`). Raises ValueError for a rank
        outside 0..world_size-1, WeightTransferError when the others do not come within `spec.timeout_s`."""
        if not 0 <= rank < spec.world_size:
            raise ValueError(f"weight group rank {rank} outside 0..{spec.world_size - 1} (world_size {spec.world_size})")
        host, port = spec.host_port()
        device = torch.device(device)
        timeout = dt.timedelta(seconds=spec.timeout_s)
        listener = None
        try:
            if rank == 0:  # bind the store to `host` only (TCPStore alone would listen on every interface)
                listener = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
            store = dist.TCPStore(host, port, spec.world_size, is_master=rank == 0, timeout=timeout,
                                  wait_for_workers=False, master_listen_fd=listener.fileno() if listener else None)  # fmt: skip
            prefixed = dist.PrefixStore(STORE_PREFIX, store)
            if backend_for(device) == "nccl":  # pragma: no cover - needs CUDA
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = timeout
                group = dist.ProcessGroupNCCL(prefixed, rank, spec.world_size, opts)
            else:
                opts = dist.ProcessGroupGloo._Options()
                opts._timeout = timeout
                # a loopback group stays on loopback; otherwise gloo's device follows this host's name
                loopback = ipaddress.ip_address(socket.gethostbyname(host)).is_loopback if ":" not in host else host == "::1"
                gloo = dist.ProcessGroupGloo
                opts._devices = [gloo.create_device(hostname="127.0.0.1") if loopback else gloo.create_default_device()]
                group = dist.ProcessGroupGloo(prefixed, rank, spec.world_size, opts)
            # a first collective: returns once every rank is in (gloo connects lazily otherwise)
            flag = torch.ones(1, device=device)
            group.allreduce([flag]).wait()
        except (RuntimeError, dist.DistError, OSError) as e:
            if listener is not None:
                listener.close()
            raise WeightTransferError(
                f"joining the weight group at {spec.address} as rank {rank} of {spec.world_size} failed within "
                f"{spec.timeout_s:.0f} s: {type(e).__name__}: {e}"
            ) from e
        if int(flag.item()) != spec.world_size:
            raise WeightTransferError(f"weight group at {spec.address}: {int(flag.item())} ranks, expected {spec.world_size}")
        member = cls(spec, rank, device, prefixed, group)
        member._listener = listener
        return member

    def _bcast(self, tensor: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self._group.broadcast([tensor], opts).wait()

    def send(self, version: int, tensors: dict[str, torch.Tensor], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> dict:
        """Rank 0: broadcast `tensors` (HF names -> tensors of any device/dtype) as policy `version`. Returns
        {"num_tensors", "bytes", "buckets"}. Raises WeightTransferError (a receiver gone, a timeout); the group is
        closed then."""
        if self.rank != 0:
            raise ValueError("only rank 0 (the trainer) sends weights")
        names = list(tensors)
        dtypes = [str(tensors[n].dtype).removeprefix("torch.") for n in names]
        shapes = [list(tensors[n].shape) for n in names]
        plan = buckets(dtypes, shapes, bucket_bytes)
        manifest = {"version": int(version), "names": names, "dtypes": dtypes, "shapes": shapes,
                    "bucket_bytes": int(bucket_bytes)}  # fmt: skip
        total = 0
        try:
            self._store.set(f"manifest/{int(version)}", json.dumps(manifest))
            for idx in plan:
                parts = [tensors[names[i]].detach().reshape(-1).to(self.device) for i in idx]
                flat = parts[0].contiguous() if len(parts) == 1 else torch.cat(parts)  # a lone tensor: no copy
                self._bcast(flat)
                total += flat.numel() * flat.element_size()
        except (RuntimeError, dist.DistError) as e:
            self.close()
            raise WeightTransferError(f"sending policy version {version} to the weight group at {self.spec.address} "
                                      f"failed: {type(e).__name__}: {e}") from e  # fmt: skip
        return {"num_tensors": len(names), "bytes": total, "buckets": len(plan)}

    def receive(self, version: int) -> list[tuple[str, torch.Tensor]]:
        """Ranks 1..N: receive policy `version` in full; returns (name, tensor) pairs on this member's device in the
        sender's order. Raises WeightTransferError (no manifest for `version` within the timeout, a sender that
        stopped mid-way); nothing partial is returned and the group is closed then."""
        try:
            manifest = json.loads(self._store.get(f"manifest/{int(version)}"))
            if manifest.get("version") != int(version):
                raise WeightTransferError(f"manifest for version {version} names version {manifest.get('version')}")
            names, dtypes, shapes = manifest["names"], manifest["dtypes"], manifest["shapes"]
            out: list[tuple[str, torch.Tensor]] = []
            for idx in buckets(dtypes, shapes, int(manifest["bucket_bytes"])):
                sizes = [int(torch.Size(shapes[i]).numel()) for i in idx]
                flat = torch.empty(sum(sizes), dtype=_dtype(dtypes[idx[0]]), device=self.device)
                self._bcast(flat)
                for i, part in zip(idx, flat.split(sizes), strict=True):
                    out.append((names[i], part.view(shapes[i])))
        except (RuntimeError, dist.DistError, KeyError, ValueError) as e:
            self.close()
            if isinstance(e, WeightTransferError):
                raise
            raise WeightTransferError(f"receiving policy version {version} from the weight group at "
                                      f"{self.spec.address} failed: {type(e).__name__}: {e}") from e  # fmt: skip
        return out

    def close(self) -> None:
        """Leave the group (idempotent). The store's host (rank 0) stops serving it."""
        group, self._group = self._group, None
        if group is not None and hasattr(group, "shutdown"):
            try:
                group.shutdown()
            except RuntimeError:
                pass
        self._store = None
        listener, self._listener = getattr(self, "_listener", None), None
        if listener is not None:
            listener.close()

    @property
    def closed(self) -> bool:
        """True once `close` ran (explicitly or after a failed transfer)."""
        return self._group is None
