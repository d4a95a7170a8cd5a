"""The "behaviour unchanged" check of a refactor: a short seeded `rl` run on the tiny model (CPU) and the numbers
of its `metrics.jsonl` that a refactor must leave exactly as they were.

The run: a tiny Qwen3-format model (hidden 64, 2 layers, seed 0) on two sources, reverse-text in-process and
GridSim (synthetic days, `env_server.synthetic`) over the NeMo Gym protocol from the env server `rl` starts, 3 steps
of 4 groups x 4 rollouts with `max_async_level = 0` and `max_inflight = batch_size` (every step samples exactly its
own groups with policy version N - 1, so nothing depends on timing), seeded sampling (one
seed per rollout and turn), a seeded trainer, and an eval of 4 tasks per source on the base policy and after step 3.

Kept: every value of the orchestrator, trainer and eval rows except wall-clock and memory ones (`time`, `*_s`,
`*time*`, `*mem*`). Integers, booleans and strings must be equal; floats must agree to rtol 1e-9 (atol 1e-12), except
the trainer's, which must agree to rtol 1e-4 (atol 1e-9): see "Another machine" below.
Measured (three runs of the pre-refactor code, commit 61f04c4, and one of the refactored code, on 2 shared cores):
every float agreed bit for bit except statistics over a step's rollouts (`reward_std` between pre-refactor runs;
`reward`, `reward/reverse` in the refactored run), which differed in the last digit (~1e-17): the batch lists
groups in the order they finish, and the sums run in that order. The trainer's numbers (loss, grad_norm, entropy,
mismatch_kl ...) and every integer were equal in all four runs. `--write` runs twice and refuses
to record when the two runs differ beyond the tolerance.

Re-recorded once since (2026-12-01, the file's `recorded.commit`), for two changes made on purpose and checked
against a dump of the old baseline first: the orchestrator's rows were unchanged except for new fields
(`adv_abs_mean`, `zero_spread_groups_pct`); the trainer's loss, grad_norm, entropy and ratio moved by ~1e-7
relative (fp32 rounding of the packed-attention / concatenated micro-batch fast path, issue 17) next to new fields
(`nonfinite`, `logp_grad_norm/*`); eval values changed because eval rollout ids now include the source name (issue
13: two sources with the same task ids no longer share sampling seeds), which reseeds eval sampling.

Another machine (2026-12-01, the same code on a restarted machine with a fresh install): every orchestrator and eval
value and every integer was equal, but the trainer's fp32 numbers were not: step 1 (on-policy) moved by ~1e-8
relative (entropy 5.565879251 vs 5.565879313 recorded, the mean importance ratio 0.99999999 vs 1.0), identically
in two runs, so the machine's fp32 kernels, not timing; with lr 0.02 it grew to ~8e-6 relative by step 3
(grad_norm). Those two runs also differed from each other from step 2 on, because a step listed its groups in
completion order and the trainer's sums ran in that order; the scheduler now lists them in launch order
(tests/orchestrator/test_scheduler.py), so runs on one machine agree bit for bit again. A refactor that changes
what is trained moves these numbers by far more than 1e-4, so the trainer's tolerance is `tolerance.trainer` in the
baseline file (rtol 1e-4, atol 1e-9) and the rest keeps the bit-level one.

    python -m tests.integration.behaviour --write tests/integration/rl_baseline.json   # record (pre-refactor code)
    python -m tests.integration.behaviour --check tests/integration/rl_baseline.json   # compare (exit 1 on a diff)

The slow test `tests/integration/test_behaviour_unchanged.py` runs `--check`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

REPO = Path(__file__).resolve().parents[2]
STEPS = 3
PROCESSES = ("orchestrator", "trainer", "eval")
TRAINER_TOLERANCE = {"trainer": {"rtol": 1e-4, "atol": 1e-9}}  # fp32 kernels differ between machines (docstring)


def config_text(run: Path, model: Path) -> str:
    """The run's `rl` config (TOML)."""
    return f"""
max_steps = {STEPS}
seq_len = 2048
output_dir = "{run}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{model}"
dtype = "float32"  # recorded in fp32: the same on every host, whatever its bf16 speed
[trainer]
seed = 0
threads = 1
[trainer.optim]
lr = 0.02
[orchestrator]
batch_size = 16
max_async_level = 0
seed = 0
traces_per_step = 2
[orchestrator.concurrency]
max_inflight = 16
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 40
seed = 0
[[orchestrator.train.source]]
name = "reverse"
env.id = "reverse-text"
[[orchestrator.train.source]]
name = "gridsim"
env.taskset.id = "nemo-gym"
env.taskset.dataset = "{run.parent / 'gym/resources_servers/gridsim_v1/data/train.jsonl'}"
env.taskset.task.resources_url = "http://127.0.0.1:{free_port()}"
env.agent.max_turns = 2
[orchestrator.eval]
interval = {STEPS}
num_examples = 4
[orchestrator.eval.sampling]
max_completion_tokens = 40
seed = 1
[inference.server]
port = {free_port()}
[env_server]
synthetic = true  # the days the baseline was recorded on (GridSim's default became the packaged ERCOT days)
"""


def is_timing(key: str) -> bool:
    """Wall-clock and memory fields: they differ run to run by nature."""
    return key == "time" or key.endswith("_s") or key.endswith("_per_s") or "time" in key or "mem" in key


def deterministic_rows(run: Path) -> dict[str, list[dict[str, Any]]]:
    """metrics.jsonl rows by process, without the timing fields, sorted by step."""
    out = {}
    for proc in PROCESSES:
        rows = sorted(read_metrics(run, proc), key=lambda r: r["step"])
        out[proc] = [{k: v for k, v in r.items() if not is_timing(k)} for r in rows]
    return out


def run_once(workdir: Path, timeout_s: float = 900) -> dict[str, list[dict[str, Any]]]:
    """Build the model, run `rl` for STEPS steps, return the deterministic rows. Raises RuntimeError (with the log's
    tail) when `rl` fails."""
    from prime_rl.models.tiny import build_tiny_model

    model = workdir / "model"
    build_tiny_model(model, hidden=64, layers=2, seed=0)
    run = workdir / "run"
    cfg = workdir / "rl.toml"
    cfg.write_text(config_text(run, model))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.rl", "@", str(cfg)], capture_output=True, text=True,
                       timeout=timeout_s, cwd=workdir, env=env)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"rl exited {r.returncode}:\n{(r.stdout + r.stderr)[-4000:]}")
    return deterministic_rows(run)


def compare(expected: dict[str, Any], got: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Differences between a recorded baseline and a run's rows: non-float values must be equal, floats within
    `expected["rtol"]`/`expected["atol"]`, or a process's own `expected["tolerance"][proc]` (`rtol`, `atol`) where
    the file has one; missing or extra fields and rows are differences."""
    diffs = []
    for proc in PROCESSES:
        tol = expected.get("tolerance", {}).get(proc, {})
        rtol, atol = tol.get("rtol", expected["rtol"]), tol.get("atol", expected["atol"])
        want, have = expected["rows"][proc], got[proc]
        if len(want) != len(have):
            diffs.append(f"{proc}: {len(have)} rows, expected {len(want)}")
            continue
        for w, h in zip(want, have, strict=True):
            for k in sorted(set(w) | set(h)):
                if k not in h or k not in w:
                    diffs.append(f"{proc} step {w['step']}: field {k!r} only in {'expected' if k in w else 'new run'}")
                    continue
                a, b = w[k], h[k]
                if not (isinstance(a, float) or isinstance(b, float)):
                    if a != b:
                        diffs.append(f"{proc} step {w['step']} {k}: {b!r} != expected {a!r}")
                elif a is None or b is None or not math.isclose(a, b, rel_tol=rtol, abs_tol=atol):
                    diffs.append(f"{proc} step {w['step']} {k}: {b!r} not within rtol={rtol}, atol={atol} of {a!r}")
    return diffs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path, help="run twice and record the baseline here (refused when the two runs differ)")
    g.add_argument("--check", type=Path, help="run once and compare with this baseline")
    g.add_argument("--dump", type=Path, help="run once and write the rows here (for a side-by-side look)")
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--atol", type=float, default=1e-12)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prime-rl-behaviour-") as tmp:
        first = run_once(Path(tmp) / "a")
        if args.dump:
            args.dump.write_text(json.dumps(first, indent=1) + "\n")
            return
        if args.check:
            diffs = compare(json.loads(args.check.read_text()), first)
            print("\n".join(diffs) if diffs else f"behaviour unchanged: metrics.jsonl matches {args.check}")
            raise SystemExit(1 if diffs else 0)
        second = run_once(Path(tmp) / "b")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    baseline = {
        "recorded": {"commit": commit, "command": "python -m tests.integration.behaviour --write " + str(args.write)},
        "rtol": args.rtol, "atol": args.atol, "tolerance": TRAINER_TOLERANCE, "rows": first,
    }
    diffs = compare({**baseline, "tolerance": {}}, second)  # one machine, one code: every float to rtol/atol
    if diffs:
        raise SystemExit("two runs of the same code differ; nothing recorded:\n" + "\n".join(diffs))
    args.write.write_text(json.dumps(baseline, indent=1) + "\n")
    print(f"wrote {args.write} (two runs agreed)")


if __name__ == "__main__":
    main()
