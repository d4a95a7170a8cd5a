"""Control plane with rollout workers: rollouts/s of the orchestrator with `workers.count` = 0, 1 and 2.

The orchestrator plays GridSim rollouts (2 turns each: rendering, tool parsing, GridSim's tool and verify,
advantages, packing, writing rank files) against an inference stub that answers at once, with the agent loop in the
orchestrator process (`count = 0`) or in 1 and 2 rollout worker processes (prime_rl.orchestrator.workers), side by
side in one run, each count `--repeats` times interleaved (0, 1, 2, 0, 1, 2, ...). Two stubs:

- `inprocess`: each process answers with `benchmarks/orchestrator.py`'s `InstantClient` (no HTTP); the workers
  build it with `runtime` below;
- `http`: the stub server of `benchmarks/orchestrator.py` in its own process, over real HTTP (`InferenceClient`);
  the workers build their backend, renderer and sources from the config (the `orchestrator` command's own path).

Printed per count: rollouts/s over steps 2..N (steady state; the median over repeats, each repeat in brackets), the
speedup over `count = 0`, the scaling efficiency (rate with 2 workers / (2 x rate with 1)), and the CPU per rollout
over the same steps summed over the orchestrator and its workers (`psutil`; the stub server's own CPU is not
counted), i.e. the per-core cost: 1 / (CPU per rollout) is the rollouts/s one core sustains. With workers, the
orchestrator's share is printed apart: 1 / (its CPU per rollout) is the rate at which the one scheduler process
saturates, whatever the number of workers.

Usage: python benchmarks/control_plane_workers.py [--steps 10] [--batch-size 64] [--group-size 8]
       [--max-inflight 64] [--repeats 3] [--counts 0 1 2] [--client inprocess|http|both] [--no-archive]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from benchmarks.orchestrator import InstantClient, stub_server  # noqa: E402

from prime_rl.config.orchestrator import OrchestratorConfig, RendererConfig  # noqa: E402
from prime_rl.models.renderer import load_tokenizer, make_renderer  # noqa: E402
from prime_rl.orchestrator.main import Orchestrator  # noqa: E402
from prime_rl.orchestrator.sources import build_source  # noqa: E402
from prime_rl.orchestrator.worker_main import WorkerRuntime  # noqa: E402
from prime_rl.transport.atomic import atomic_write_dir  # noqa: E402


async def runtime(cfg: OrchestratorConfig, index: int) -> WorkerRuntime:
    """A worker's runtime for the `inprocess` stub: `InstantClient` (reporting each job's policy version), the
    model's renderer and the config's train sources."""
    tok = load_tokenizer(cfg.model.name)
    client = InstantClient(tok)
    sources = [build_source(s) for s in cfg.train.source]
    for source in sources:
        await source.start()
    return WorkerRuntime(client, make_renderer(tok, cfg.renderer), sources,
                         on_policy_version=lambda v: setattr(client, "version", v))  # fmt: skip


def _cpu(pids: list[int]) -> float:
    """Summed user + system CPU seconds of `pids` (this process included by the caller)."""
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


async def run_once(args, model: Path, count: int, client, url: str | None) -> dict:
    """One orchestrator run of `args.steps` steps with `count` workers and a trainer that publishes at once."""
    with tempfile.TemporaryDirectory() as d:
        cfg = OrchestratorConfig(
            output_dir=Path(d) / "run", batch_size=args.batch_size, max_steps=args.steps, seq_len=4096,
            max_async_level=1, model={"name": str(model)}, workers={"count": count},
            train={"group_size": args.group_size, "source": [{"env": {"id": "gridsim"}}]},
            concurrency={"max_inflight": args.max_inflight}, traces_per_step=2, eval={},
            archive={"enabled": not args.no_archive},
            **({"client": {"base_url": [url]}} if url else {}),
        )  # fmt: skip
        sources = [build_source(s) for s in cfg.train.source]
        renderer = make_renderer(load_tokenizer(model), RendererConfig())
        orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=sources, poll_s=0.002, echo=False,
                            worker_runtime=None if url else "benchmarks.control_plane_workers:runtime")  # fmt: skip
        marks: dict[str, tuple[float, float]] = {}
        me = psutil.Process()

        def mark(name: str) -> None:
            pids = orch.workers.pids if orch.workers is not None else []
            mine = me.cpu_times()
            marks[name] = (time.perf_counter(), mine.user + mine.system, _cpu(pids))

        async def trainer():
            for n in range(1, args.steps + 1):
                path = cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
                while not path.exists():
                    await asyncio.sleep(0.002)
                if n in (1, args.steps):
                    mark("first" if n == 1 else "last")
                atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda x: (x / "w").write_bytes(b""))

        t = asyncio.create_task(trainer())
        t0 = time.perf_counter()
        await orch.run()
        wall = time.perf_counter() - t0
        await t
    (t1, o1, w1), (t2, o2, w2) = marks["first"], marks["last"]
    n = (args.steps - 1) * args.batch_size
    return {"rate": n / (t2 - t1), "cpu_ms": (o2 - o1 + w2 - w1) / n * 1e3, "orch_ms": (o2 - o1) / n * 1e3,
            "workers_ms": (w2 - w1) / n * 1e3, "wall_s": wall}  # fmt: skip


def _line(label: str, runs: list[dict], base: float | None) -> tuple[str, float]:
    rate = statistics.median(r["rate"] for r in runs)
    cpu, orch, workers = (statistics.median(r[k] for r in runs) for k in ("cpu_ms", "orch_ms", "workers_ms"))
    each = ", ".join(f"{r['rate']:.0f}" for r in runs)
    speed = f" | x{rate / base:.2f} of 0 workers" if base else ""
    split = f" (orchestrator {orch:.2f} + workers {workers:.2f})" if workers else ""
    return (
        f"{label:>12}: {rate:8.1f} rollouts/s ({each}){speed} | CPU {cpu:.2f} ms/rollout{split} = "
        f"{1e3 / cpu:.0f} rollouts/s per core | run {statistics.median(r['wall_s'] for r in runs):.1f} s"
    ), rate


async def bench(args, model: Path, mode: str) -> None:
    tok = load_tokenizer(model)
    proc = url = None
    if mode == "http":
        from prime_rl.config.orchestrator import ClientConfig
        from prime_rl.inference.client import InferenceClient

        proc, url = stub_server(tok)
    try:
        results: dict[int, list[dict]] = {c: [] for c in args.counts}
        for _ in range(args.repeats):
            for count in args.counts:
                if url:
                    client = InferenceClient(ClientConfig(base_url=[url]))
                    await client.wait_healthy(60)
                else:
                    client = InstantClient(tok)
                try:
                    results[count].append(await run_once(args, model, count, client, url))
                finally:
                    if url:
                        await client.aclose()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    print(
        f"# {mode} stub: {args.steps} steps x {args.batch_size} GridSim rollouts (2 turns), group size "
        f"{args.group_size}, max_inflight {args.max_inflight}, max_async_level 1, archive "
        f"{'off' if args.no_archive else 'on'}; median of {args.repeats}"
    )
    rates = {}
    for count in args.counts:
        line, rates[count] = _line(f"{count} workers", results[count], rates.get(0) if count else None)
        print(line)
    if 1 in rates and 2 in rates:
        print(f"{'scaling':>12}: 2 workers / (2 x 1 worker) = {rates[2] / (2 * rates[1]):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-inflight", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--counts", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--client", choices=["inprocess", "http", "both"], default="both")
    p.add_argument("--no-archive", action="store_true", help="orchestrator.archive.enabled = false")
    args = p.parse_args()
    from prime_rl.models.tiny import cached_tiny_model

    model = cached_tiny_model()
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, {psutil.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.1f}' for x in psutil.getloadavg())}"
    )
    for mode in ["inprocess", "http"] if args.client == "both" else [args.client]:
        asyncio.run(bench(args, model, mode))
    print(f"# load average at the end {' '.join(f'{x:.1f}' for x in psutil.getloadavg())}")


if __name__ == "__main__":
    main()
