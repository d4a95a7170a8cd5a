"""Rollout transports side by side in one run: the time from the orchestrator's `send` of a step's batches to the
moment each trainer rank's `receive` returns its batch, for `rollout_transport.type = "filesystem"` and `"tcp"`.

Both go through the real classes (prime_rl.transport.rollouts.build_sender / build_receiver): the sender on an
asyncio loop in this process (tcp: its `serve` task runs alongside), each trainer rank's receiver in its own child
process (spawned once per transport and world size, kept for all steps). Per measured step the ranks first call
`receive(step)` and wait (the trainer waiting for data), then the clock starts and the orchestrator calls
`send(step, batches)`; a rank's time is its `receive` return (CLOCK_MONOTONIC, shared by the processes) minus the
start, and the step's time is that of the last rank. Both paths include encoding the batch (msgpack,
prime_rl.transport.batch.encode_batch) and decoding and checking it on the rank; filesystem adds the atomic write
(temporary file, fsync, rename) and the rank's 5 ms poll for the file, tcp the ZMQ transfer over loopback.

The batches are real: per rank, packed micro-batches of `--seq-len` tokens (random token ids, a loss mask over
about half the tokens, random advantages and logprobs) with as many tokens as make about `--sizes` bytes of encoded
batch (21 bytes per token plus msgpack framing); the table gives the encoded size. Transports are interleaved (their
order alternates per repetition) so that changing load on the machine hits both alike; the numbers are medians
over `--reps` repetitions. The filesystem path writes into `--dir` (default: a temporary folder), removing each
step's files after it: a local disk gives a lower bound for a shared filesystem such as NFS.

    python benchmarks/rollout_transport.py [--sizes 65536 1048576 16777216 67108864] [--ranks 1 2] [--reps 7]
        [--seq-len 4096] [--dir DIR] [--json OUT]

Prints the host (lscpu's model name and CPU count, and the 2-thread 2048 x 2048 fp32 matmul GFLOP/s of
benchmarks/trainer.py's `matmul_flops`, the speed docs/results/README.md compares hosts by) and one row per world
size and batch size: each transport's median milliseconds and the tcp/filesystem ratio (< 1: tcp is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TRANSPORTS = ("filesystem", "tcp")
BYTES_PER_TOKEN = 21  # input_ids, position_ids (int32), loss_mask (bool), advantages, logprobs, temperature (float32)
DEFAULT_SIZES = (64 * 2**10, 2**20, 16 * 2**20, 64 * 2**20)


def host_info() -> dict[str, Any]:
    """lscpu's model name and CPU count, and the 2-thread fp32 matmul GFLOP/s (benchmarks/trainer.py)."""
    info: dict[str, Any] = {"cpu_model": "unknown", "cpus": None}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                info["cpu_model"] = value.strip()
            elif key.strip() == "CPU(s)":
                info["cpus"] = int(value.strip())
    sys.path.insert(0, str(REPO))
    from benchmarks.trainer import matmul_flops

    info["matmul_gflops_2_threads"] = matmul_flops(2) / 1e9
    return info


def make_batches(size: int, world: int, seq_len: int, seed: int = 0) -> list:
    """Per rank, a `StepBatch` of packed micro-batches (at most `seq_len` tokens each) whose encoding is about `size`
    bytes; step 0 (the caller sets the step)."""
    from prime_rl.transport.batch import MicroBatch, StepBatch

    rng = np.random.default_rng(seed)
    tokens = max(1, (size - 400) // BYTES_PER_TOKEN)
    out = []
    for rank in range(world):
        mbs, left = [], tokens
        while left > 0:
            count = min(seq_len, left)
            left -= count
            mbs.append(
                MicroBatch(
                    rng.integers(0, 151_000, count),
                    np.arange(count),
                    rng.random(count) < 0.5,
                    rng.standard_normal(count),
                    -rng.exponential(1.0, count),
                    np.ones(count),
                )
            )
        loss = sum(mb.num_loss_tokens for mb in mbs) * world
        out.append(StepBatch(step=0, rank=rank, world_size=world, total_loss_tokens=loss, micro_batches=mbs))
    return out


def _rank_worker(cfg: dict[str, Any], run_dir: str, rank: int, world: int, conn) -> None:
    """Child process: trainer rank `rank`'s receiver; per step number from `conn`, receive and answer
    (monotonic time at receipt, tokens received); None ends it."""
    from prime_rl.config.rollout_transport import RolloutTransportConfig
    from prime_rl.transport.rollouts import build_receiver

    rx = build_receiver(RolloutTransportConfig(**cfg), Path(run_dir), rank=rank, world_size=world, timeout_s=120.0)
    conn.send("ready")
    try:
        while (step := conn.recv()) is not None:
            batch = rx.receive(step, step)
            conn.send((time.monotonic(), batch.step, sum(len(mb) for mb in batch.micro_batches)))
    finally:
        rx.close()


class Link:
    """One transport at one world size: the orchestrator's sender (and its serve task) and the ranks' processes."""

    def __init__(self, kind: str, world: int, run_dir: Path):
        from prime_rl.config.rollout_transport import RolloutTransportConfig
        from prime_rl.ports import free_port
        from prime_rl.transport.rollouts import build_sender

        self.kind, self.world, self.run_dir, self.step = kind, world, run_dir, 0
        cfg = RolloutTransportConfig(type=kind, port=free_port())
        self.sender = build_sender(cfg, run_dir, num_ranks=world, max_async_level=1, start_step=1, timeout_s=120.0)
        self.server = asyncio.get_running_loop().create_task(self.sender.serve())
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for rank in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_rank_worker, args=(cfg.model_dump(), str(run_dir), rank, world, child), daemon=True
            )
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    async def ready(self) -> None:
        for conn in self.conns:
            if await asyncio.to_thread(conn.recv) != "ready":
                raise RuntimeError(f"{self.kind}: a trainer rank process did not start")

    async def measure(self, batches: list) -> float:
        """Seconds from `send` of the next step to the last rank's receipt (module docstring)."""
        self.step += 1
        step = self.step
        for batch in batches:
            batch.step = step
        for conn in self.conns:
            conn.send(step)
        await asyncio.sleep(0.05)  # every rank is inside receive (tcp: its ask reached the orchestrator)
        t0 = time.monotonic()
        await self.sender.send(step, batches)
        if self.server.done():
            self.server.result()  # raises the serve task's error
        got = [await asyncio.to_thread(conn.recv) for conn in self.conns]
        want = sum(len(mb) for mb in batches[0].micro_batches)
        for rank, (_, got_step, tokens) in enumerate(got):
            if got_step != step or tokens != want:
                raise RuntimeError(
                    f"{self.kind}: rank {rank} got step {got_step} with {tokens} tokens, expected "
                    f"step {step} with {want}"
                )
        if self.kind == "filesystem":
            shutil.rmtree(self.run_dir / "rollouts" / f"step_{step}", ignore_errors=True)
        return max(t for t, _, _ in got) - t0

    async def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.kill()
        self.server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.server
        await self.sender.aclose()


async def run(args, root: Path) -> list[dict[str, Any]]:
    """The medians per (world size, batch size, transport); see the module docstring."""
    from prime_rl.transport.batch import encode_batch

    links = {}
    for world in args.ranks:
        for kind in TRANSPORTS:
            link_dir = root / f"{kind}_{world}"
            link_dir.mkdir(parents=True, exist_ok=True)
            links[kind, world] = Link(kind, world, link_dir)
    try:
        await asyncio.gather(*(link.ready() for link in links.values()))
        batches = {
            (world, size): make_batches(size, world, args.seq_len) for world in args.ranks for size in args.sizes
        }
        times: dict[tuple[int, int, str], list[float]] = {
            (world, size, kind): [] for world in args.ranks for size in args.sizes for kind in TRANSPORTS
        }
        for world in args.ranks:  # one untimed step per link and size: imports, connections, page cache
            for size in args.sizes:
                for kind in TRANSPORTS:
                    await links[kind, world].measure(batches[world, size])
        for rep in range(args.reps):
            order = TRANSPORTS if rep % 2 == 0 else TRANSPORTS[::-1]
            for world in args.ranks:
                for size in args.sizes:
                    for kind in order:
                        times[world, size, kind].append(await links[kind, world].measure(batches[world, size]))
    finally:
        for link in links.values():
            await link.close()
    rows = []
    for world in args.ranks:
        for size in args.sizes:
            med = {kind: statistics.median(times[world, size, kind]) * 1e3 for kind in TRANSPORTS}
            rows.append(
                {
                    "ranks": world,
                    "target_bytes": size,
                    "batch_bytes": len(encode_batch(batches[world, size][0])),
                    "median_ms": med,
                    "ms": {kind: [t * 1e3 for t in times[world, size, kind]] for kind in TRANSPORTS},
                    "tcp_over_filesystem": med["tcp"] / med["filesystem"],
                }
            )
    return rows


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:.2f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:.1f} KiB"


def report(result: dict[str, Any]) -> str:
    """The host line and the side-by-side table (tcp/filesystem < 1: tcp is faster)."""
    host = result["host"]
    lines = [
        f"host: {host['cpu_model']}, {host['cpus']} CPUs, 2-thread fp32 matmul {host['matmul_gflops_2_threads']:.0f} "
        f"GFLOP/s; {result['reps']} reps (median), seq_len {result['seq_len']}, filesystem dir {result['dir']}",
        "",
        f"{'ranks':>5}{'batch/rank':>13}{'filesystem ms':>15}{'tcp ms':>10}{'tcp/fs':>8}",
    ]
    for row in result["rows"]:
        med = row["median_ms"]
        lines.append(
            f"{row['ranks']:>5}{_mib(row['batch_bytes']):>13}{med['filesystem']:>15.2f}{med['tcp']:>10.2f}"
            f"{row['tcp_over_filesystem']:>8.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="encoded bytes per rank")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="trainer world sizes")
    ap.add_argument("--reps", type=int, default=7, help="timed steps per transport, world size and batch size")
    ap.add_argument("--seq-len", type=int, default=4096, help="tokens per packed micro-batch")
    ap.add_argument("--dir", type=Path, default=None, help="folder for the filesystem transport (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers as JSON here")
    args = ap.parse_args()
    if min(args.sizes) < 1 or min(args.ranks) < 1 or args.reps < 1:
        ap.error("--sizes, --ranks and --reps must be positive")
    with tempfile.TemporaryDirectory(prefix="rollout-transport-", dir=args.dir) as tmp:
        t0 = time.monotonic()
        rows = asyncio.run(run(args, Path(tmp)))
        wall = time.monotonic() - t0
        result = {
            "host": host_info(),
            "reps": args.reps,
            "seq_len": args.seq_len,
            "dir": str(Path(tmp).parent),
            "wall_s": wall,
            "rows": rows,
        }
    print(report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
