"""Benchmark: `--help` of every command, as a ratio to a bare interpreter start (`python -c pass`), side by side.

    .venv/bin/python benchmarks/cli_help.py [--runs 5] [--max-ratio 30] [--json]

Each command runs `--help` `runs` times through its installed console script (in the same folder as this Python),
interleaved with `python -c pass`; the medians and their ratio are printed. `--max-ratio` exits 1 when a command's
ratio exceeds it (CI guard: `tests/test_config.py` asserts under 40x). Absolute seconds depend on the machine and its load;
the ratio much less so. Target: under 1 s per command on a 2-core machine. What bounds the ratio from below:
importing pydantic, then the config models and the help rendering.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = ("rl", "sft", "trainer", "orchestrator", "inference", "eval", "env-server", "gridsim", "prime-rl")


def _time(argv: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    return elapsed


def measure(commands: tuple[str, ...] = COMMANDS, runs: int = 5) -> dict[str, dict[str, float]]:
    """{command: {"seconds": median --help time, "ratio": that / median `python -c pass` time}}, plus an entry
    "python -c pass" with the baseline. Runs are interleaved so that load changes hit both alike."""
    bindir = Path(sys.executable).parent
    base: list[float] = []
    times: dict[str, list[float]] = {c: [] for c in commands}
    for _ in range(runs):
        for c in commands:
            base.append(_time([sys.executable, "-c", "pass"]))
            times[c].append(_time([str(bindir / c), "--help"]))
    b = statistics.median(base)
    out = {"python -c pass": {"seconds": b, "ratio": 1.0}}
    for c, xs in times.items():
        m = statistics.median(xs)
        out[c] = {"seconds": m, "ratio": m / b}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--max-ratio", type=float, default=None, help="exit 1 if a command's ratio exceeds this")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args()
    res = measure(runs=args.runs)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"{'command':<16} {'median s':>9} {'x python -c pass':>17}")
        for c, r in res.items():
            print(f"{c:<16} {r['seconds']:>9.3f} {r['ratio']:>17.1f}")
    if args.max_ratio is not None:
        bad = {c: round(r["ratio"], 1) for c, r in res.items() if r["ratio"] > args.max_ratio}
        if bad:
            print(f"over {args.max_ratio}x: {bad}", file=sys.stderr)
            raise SystemExit(1)


if __name__ == "__main__":
    main()
