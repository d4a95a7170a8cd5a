"""The weight group's device path (prime_rl.transport.weight_collective) between two processes: rank 0 sends a
state dict (fp32 and bf16 tensors, `--mib` MiB in all) as one policy version, rank 1 receives it; the received
tensors must equal the sent ones bit for bit. With two or more CUDA devices the ranks use cuda:0 and cuda:1 and the
group is NCCL; otherwise both use the CPU and the group is gloo (NCCL cannot put two ranks on one device).

    python scripts/weight_group_check.py [--mib 64] [--cpu]

Prints one line: backend, devices, MiB, send seconds, and `ok`; exits 1 when the tensors differ or a rank failed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def state_dict(mib: int, device: str) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    n = max(1, mib * 2**20 // 4 // 4)
    sd = {f"model.layers.{i}.w": torch.randn(n, generator=g) for i in range(3)}
    sd["model.embed.w"] = torch.randn(n, generator=g).to(torch.bfloat16)
    return {k: v.to(device) for k, v in sd.items()}


def receiver(address: str, device: str, mib: int, queue) -> None:
    import torch

    from prime_rl.transport.weight_collective import GroupSpec, WeightGroup

    try:
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        group = WeightGroup.open(GroupSpec(address, 2, 120), 1, device)
        got = dict(group.receive(1))
        want = state_dict(mib, device)
        same = list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
        group.close()
        queue.put("ok" if same else "received tensors differ from the sent ones")
    except Exception as e:  # noqa: BLE001 - reported by the parent
        queue.put(f"receiver failed: {type(e).__name__}: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even where CUDA devices are present")
    args = ap.parse_args(argv)
    import torch

    from prime_rl.ports import free_port
    from prime_rl.transport.weight_collective import GroupSpec, WeightGroup, backend_for

    two_gpus = not args.cpu and torch.cuda.is_available() and torch.cuda.device_count() >= 2
    send_dev, recv_dev = ("cuda:0", "cuda:1") if two_gpus else ("cpu", "cpu")
    address = f"tcp://127.0.0.1:{free_port()}"
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=receiver, args=(address, recv_dev, args.mib, queue), daemon=True)
    proc.start()
    if send_dev.startswith("cuda"):
        torch.cuda.set_device(send_dev)
    group = WeightGroup.open(GroupSpec(address, 2, 120), 0, send_dev)
    sd = state_dict(args.mib, send_dev)
    t0 = time.perf_counter()
    sent = group.send(1, sd)
    if send_dev.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    verdict = queue.get(timeout=300)
    proc.join(timeout=60)
    group.close()
    print(f"weight group: backend {backend_for(torch.device(send_dev))}, {send_dev} -> {recv_dev}, "
          f"{sent['bytes'] / 2**20:.1f} MiB in {sent['buckets']} bucket(s), send {dt:.3f} s: {verdict}")  # fmt: skip
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
