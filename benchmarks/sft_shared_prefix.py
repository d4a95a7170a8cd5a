"""SFT throughput on GridSim demonstrations: shared-prefix micro-batches versus packing, side by side in one run.

    .venv/bin/python benchmarks/sft_shared_prefix.py [--hidden 128 --layers 2 --steps 6 --batch 16 --threads 2]

Writes `gridsim sft-data` (synthetic days) and a tiny model to a temporary folder, runs `sft` for `--steps` steps
with `data.shared_prefix = false` (samples packed one per 2,048-token micro-batch) and then `true` (one micro-batch
of `--batch` samples, the ~880-token system + tools head run once), each in a fresh process, and prints each
variant's sample tokens/s (steps 2.. only), the ratio, the step-1 loss of both (they must agree: same math) and
each one's peak memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run_variant(root: Path, model: Path, data: Path, shared: bool, args: argparse.Namespace) -> list[dict]:
    out = root / f"run_shared_{shared}"
    cmd = [
        sys.executable, "-m", "prime_rl.cli.sft", "--model.name", str(model), "--data.path", str(data),
        "--output-dir", str(out), "--max-steps", str(args.steps), "--seq-len", "2048",
        "--data.batch-size", str(args.batch), "--data.micro-batch-size", str(args.batch),
        "--data.shared-prefix", str(shared).lower(), "--threads", str(args.threads), "--optim.lr", "1e-3",
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    from prime_rl.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "model", hidden=args.hidden, layers=args.layers, seed=0)
        data = root / "demos.jsonl"
        subprocess.run([sys.executable, "-m", "prime_rl.cli.gridsim", "sft-data", str(data)], check=True,
                       capture_output=True)
        res = {}
        for shared in (False, True):
            rows = [r for r in run_variant(root, Path(model), data, shared, args) if "tokens_per_s" in r]
            timed = rows[1:]
            tps = sum(r["tokens"] for r in timed) / sum(r["step_time_s"] for r in timed)
            res[shared] = (tps, rows[0]["loss"], max(r["peak_mem_gib"] for r in rows))
        for shared, (tps, loss, mem) in res.items():
            name = "shared prefix" if shared else "packed       "
            print(f"{name}: {tps:8.0f} sample tokens/s | step-1 loss {loss:.5f} | peak RSS {mem:.2f} GiB")
        print(f"ratio shared/packed: {res[True][0] / res[False][0]:.2f}x")


if __name__ == "__main__":
    main()
