"""Weight transports side by side in one run: the cost of one policy-version update of a real vLLM server, through
files (`weight_transport.type = "filesystem"`) and through the weight group (`"collective"`).

One vLLM server (prime-rl's routes and worker extension, CPU, fp32) serves a random tiny model of `--hidden` x
`--layers`; this process plays trainer rank 0 and holds the model's state dict in memory (as the trainer does after
gathering it). Per measured update the clock starts with that state dict and stops when the server's
`POST /update_weights` returned (every worker loaded the version, prefix cache reset, version recorded):

- filesystem: what `prime_rl.trainer.publish.publish_weights` does on rank 0 (`model.safetensors` + `config.json`
  written to a temporary folder, fsynced, renamed, `STABLE`), then `/update_weights {"path", "version"}`;
- collective: `/update_weights {"transport": "collective", ...}` while `WeightGroup.send` broadcasts the tensors
  (gloo over loopback; the group is joined once, before the measured updates, as a trainer holds it for the run).

Transports alternate per repetition so that changing load on the machine hits both alike; the numbers are medians
over `--reps` updates. The server's own phases (`load_s`: reading or receiving plus loading; for the collective also
`receive_s`, the receive alone) are reported too. The
filesystem path writes into `--dir` (default: a temporary folder): a local disk gives a lower bound for a shared
filesystem such as NFS.

    python benchmarks/weight_transport.py [--hidden 512] [--layers 8] [--reps 7] [--dir DIR] [--json OUT]

Prints the host (lscpu's model name and CPU count, and the 2-thread fp32 matmul GFLOP/s that docs/results/README.md
compares hosts by), the model's size and one row per transport: median
milliseconds per update, the server's median load phase, and the collective/filesystem ratio (< 1: the collective
is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


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


def write_version(sd: dict, config_src: Path, target: Path) -> None:
    """The file path's rank-0 write: safetensors + config.json into a temporary folder, renamed, then STABLE."""
    from safetensors.torch import save_file

    from prime_rl.transport.atomic import STABLE, atomic_write_dir

    def fill(tmp: Path) -> None:
        save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.copy2(config_src / "config.json", tmp / "config.json")

    atomic_write_dir(target, fill, marker=STABLE)


def post(url: str, body: dict) -> dict:
    import httpx

    r = httpx.post(url, json=body, timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"{url} answered {r.status_code}: {r.text[:500]}")
    return r.json()


def update_files(base_url: str, sd: dict, model_dir: Path, out_dir: Path, version: int) -> dict:
    target = out_dir / f"step_{version}"
    t0 = time.perf_counter()
    write_version(sd, model_dir, target)
    answer = post(f"{base_url}/update_weights", {"path": str(target), "version": version})
    total = time.perf_counter() - t0
    shutil.rmtree(target)
    return {"total_s": total, "load_s": answer["load_s"]}


def update_collective(base_url: str, sd: dict, group, body: dict, version: int) -> dict:
    errors: list[BaseException] = []

    def send() -> None:
        try:
            group.send(version, sd)
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)

    t0 = time.perf_counter()
    sender = threading.Thread(target=send)
    sender.start()
    answer = post(f"{base_url}/update_weights", {**body, "version": version})
    sender.join()
    total = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return {"total_s": total, "load_s": answer["load_s"], "receive_s": answer.get("receive_s")}


def run(hidden: int, layers: int, reps: int, out_dir: Path) -> dict[str, Any]:
    """Start the server, join the group, and time `reps` updates per transport (alternating). Returns the results."""
    from safetensors.torch import load_file

    from prime_rl.inference.testing import start_server
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port
    from prime_rl.transport.weight_collective import GroupSpec, WeightGroup

    model_dir = cached_tiny_model(hidden=hidden, layers=layers, seed=0)
    sd = load_file(str(model_dir / "model.safetensors"))
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    spec = GroupSpec(f"tcp://127.0.0.1:{free_port()}", world_size=2, timeout_s=300)
    body = {"transport": "collective", "group": {"address": spec.address, "world_size": 2, "timeout_s": 300,
                                                 "rank_offset": 1, "workers_per_server": 1}}  # fmt: skip
    times: dict[str, list[dict]] = {"filesystem": [], "collective": []}
    with start_server(model_dir, server={"weights_dir": str(out_dir)}) as srv:
        group: list = []
        joiner = threading.Thread(target=lambda: group.append(WeightGroup.open(spec, 0)))
        joiner.start()  # the first collective update joins the server's worker to the group (not measured)
        update_collective(srv.base_url, sd, _Lazy(group, joiner), body, version=1)
        version = 2
        for rep in range(reps):
            order = ("filesystem", "collective") if rep % 2 == 0 else ("collective", "filesystem")
            for name in order:
                if name == "filesystem":
                    times[name].append(update_files(srv.base_url, sd, model_dir, out_dir, version))
                else:
                    times[name].append(update_collective(srv.base_url, sd, group[0], body, version))
                version += 1
        group[0].close()
    rows = {name: {"median_ms": 1e3 * statistics.median(t["total_s"] for t in ts),
                   "server_load_median_ms": 1e3 * statistics.median(t["load_s"] for t in ts)}
            for name, ts in times.items()}  # fmt: skip
    rows["collective"]["server_receive_median_ms"] = 1e3 * statistics.median(t["receive_s"] for t in times["collective"])
    return {"hidden": hidden, "layers": layers, "tensors": len(sd), "bytes": nbytes, "reps": reps, "rows": rows,
            "ratio_collective_over_filesystem": rows["collective"]["median_ms"] / rows["filesystem"]["median_ms"]}


class _Lazy:
    """The sender of the first (joining) update: waits for the join that runs beside the server's, then sends."""

    def __init__(self, holder: list, joiner: threading.Thread):
        self.holder, self.joiner = holder, joiner

    def send(self, version: int, sd: dict) -> dict:
        self.joiner.join()
        if not self.holder:
            raise RuntimeError("joining the weight group failed (see the server's log)")
        return self.holder[0].send(version, sd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=None, help="where the filesystem path writes (default: a temp folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args(argv)
    out_dir = Path(args.dir or tempfile.mkdtemp(prefix="prime-rl-weights-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"host": host_info(), **run(args.hidden, args.layers, args.reps, out_dir)}
    host = result["host"]
    print(f"host: {host['cpu_model']} ({host['cpus']} CPUs), matmul {host['matmul_gflops_2_threads']:.0f} GFLOP/s")
    print(f"model: hidden {args.hidden} x {args.layers} layers, {result['tensors']} tensors, "
          f"{result['bytes'] / 2**20:.1f} MiB fp32; {args.reps} updates per transport")  # fmt: skip
    print(f"{'transport':<12} {'update ms (median)':>20} {'server load ms':>16}")
    for name, row in result["rows"].items():
        print(f"{name:<12} {row['median_ms']:>20.1f} {row['server_load_median_ms']:>16.1f}")
    print(f"collective: {result['rows']['collective']['server_receive_median_ms']:.1f} ms of the server's load phase "
          "were the receive (the rest: loading, as for files)")
    print(f"collective / filesystem: {result['ratio_collective_over_filesystem']:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
