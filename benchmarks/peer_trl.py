"""The peer on identical work: TRL's `GRPOTrainer` (TRL 1.16) against prime-rl, from the same model on the same task.

TRL runs in its own virtual environment, made by this script under `~/.cache/prime-rl/peer-trl/venv` (override:
$PRIME_RL_PEER_TRL_VENV): `python -m venv` + `pip install trl==1.16.0`, with the project venv's site-packages on its
path (a .pth file), so torch, transformers and prime-rl's own dependencies are shared and never changed; TRL is not a
dependency of prime-rl. The training itself runs in that venv (`_peer_trl_worker.py`), the scoring in this one.

Workload `gridsim` (without `--compare`): GridSim's first turn as a one-turn task. The prompt is exactly what
prime-rl's orchestrator sends for a task (system prompt, tools block, user message, rendered by the same renderer
with the generation prompt); the reward is the GridSim score of the first `submit_schedule` call parsed from the
completion (0 without a valid one). Settings (those of `examples/gridsim/rl.toml` but for its 64 rollouts per step,
lr 1.5e-4 and std normalisation): 32 completions per step as 4 prompts x 8, temperature 0.5, lr 1e-4 cosine, max
grad norm 1, 192 completion tokens, 50 steps, no KL term (beta 0), TRL's default loss and reward scaling (printed). The trained model is then scored like every prime-rl
model: `prime-rl eval` (vLLM inference server, temperature 0.5, 4 rollouts per day, up to 4 turns) on the 200 eval
days, paired by day against the starting model's eval.

    python benchmarks/peer_trl.py --model outputs/demo/sft/weights/step_1000 --seeds 0 1 2 \\
        --data-dir "$PRIME_RL_ERCOT_DIR" --out outputs/peer-trl

prints one line per seed (wall time, s/step, eval mean +- SE, paired difference to the start model) and writes
`summary.json`. `--steps`, `--eval-days` and `--eval-rollouts` shrink it for a smoke run.

Side by side (`_peer_compare.py`): `--compare digit gridsim reverse-text` runs, per workload, prime-rl's
`rl` and then TRL on the same model and settings and prints one markdown table each (s per RL step, rollouts/s,
trained tokens/s, peak memory per process, eval reward after the last step +- SE, and the ratios), also written to
OUT/compare.md and compare.json. Workloads: `digit` (examples/ladder/digit.toml, the random tiny 64x2 model),
`gridsim` (GridSim's first turn, benchmarks/peer/gridsim_first_turn.toml, from `--gridsim-model`, an SFT model
that calls the tool), `reverse-text` (examples/reverse_text/rl.toml from SmolLM2-135M-Instruct) and `reasoning-gym`
(examples/reasoning_gym/rl.toml from `--reasoning-gym-model`, its SFT model). `--prime-run DIR` measures a
finished `rl` run of the one workload compared instead of running `rl` again. `--steps`
overrides every workload's step count; `--parallel-sampling` runs prime-rl with `client.parallel_sampling = true`
(a group's prompt sampled as one request with n, as TRL's vLLM mode does with `num_generations`) and
`--async-level N` with `orchestrator.max_async_level = N` (0: on-policy, as TRL).

    python benchmarks/peer_trl.py --compare digit reverse-text --out outputs/peer-compare
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # _peer_compare
WORKER = Path(__file__).with_name("_peer_trl_worker.py")
TRL_VERSION = "1.16.0"


def venv_dir() -> Path:
    return Path(os.environ.get("PRIME_RL_PEER_TRL_VENV", Path.home() / ".cache" / "prime-rl" / "peer-trl" / "venv"))


def ensure_trl_venv() -> Path:
    """The TRL venv's python (created and TRL installed on first use). Raises RuntimeError naming the log on failure."""
    venv = venv_dir()
    py = venv / "bin" / "python"
    probe = [str(py), "-c", f"import trl, sys; sys.exit(trl.__version__ != {TRL_VERSION!r})"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / "install.log"
    with open(log, "ab") as f:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=f, stderr=f)
        site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        import site as _site

        (Path(site) / "_prime_rl_base.pth").write_text(_site.getsitepackages()[0] + "\n")
        r = subprocess.run([str(py), "-m", "pip", "install", f"trl=={TRL_VERSION}"], stdout=f, stderr=f)
    if r.returncode != 0 or subprocess.run(probe, capture_output=True).returncode != 0:
        raise RuntimeError(f"installing trl=={TRL_VERSION} into {venv} failed; see {log}")
    return py


def train_trl(py: Path, args: argparse.Namespace, seed: int, out: Path) -> dict:
    """Run the TRL worker for one seed; returns its summary (wall time, per-step rewards, settings)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(py), str(WORKER), "--model", str(args.model), "--out", str(out), "--seed", str(seed),
           "--steps", str(args.steps), "--lr", str(args.lr), "--temperature", str(args.temperature),
           "--prompts-per-step", str(args.prompts_per_step), "--group-size", str(args.group_size),
           "--max-completion-tokens", str(args.max_completion_tokens)]  # fmt: skip
    if args.data_dir:
        cmd += ["--data-dir", str(args.data_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    with open(out / "trl.log", "wb") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"TRL worker exited {r.returncode}; see {out / 'trl.log'}")
    return json.loads((out / "summary.json").read_text())


def score(model: Path, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """`prime-rl eval` of `model` on GridSim's eval days through a vLLM inference server; task id -> mean reward."""
    from prime_rl.ports import free_port

    port = free_port()
    bin_dir = Path(sys.executable).parent
    out.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen([str(bin_dir / "inference"), "--model.name", str(model), "--server.port", str(port),
                               "--output-dir", str(out)], stdout=open(out / "inference.log", "wb"),
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        source = {"name": "gridsim", "env": {"id": "gridsim", "agent": {"max_turns": 4},
                                             "args": {"data_dir": str(args.data_dir)} if args.data_dir else {}}}
        cmd = [str(bin_dir / "prime-rl"), "eval", "@", str(REPO / "examples/gridsim/eval.toml"),
               "--model.name", str(model), "--client.base-url", f'["http://127.0.0.1:{port}"]',
               "--output-dir", str(out), "--eval.rollouts-per-example", str(args.eval_rollouts),
               "--eval.sampling.temperature", str(args.temperature), "--eval.sampling.seed", "0",
               "--eval.source", json.dumps([source])]  # fmt: skip
        if args.eval_days:
            cmd += ["--eval.num-examples", str(args.eval_days)]
        with open(out / "eval.log", "wb") as f:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
        if r.returncode != 0:
            raise RuntimeError(f"prime-rl eval exited {r.returncode}; see {out / 'eval.log'}")
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    rows = [json.loads(line) for p in sorted(out.rglob("*.jsonl")) if p.name != "metrics.jsonl"
            for line in p.read_text().splitlines() if '"rewards"' in line]  # fmt: skip
    return {r["task_id"]: sum(r["rewards"]) / len(r["rewards"]) for r in rows}


def mean_se(x: list[float]) -> tuple[float, float]:
    n = len(x)
    m = sum(x) / n
    var = sum((v - m) ** 2 for v in x) / (n - 1) if n > 1 else 0.0
    return m, math.sqrt(var / n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="the starting model (prime-rl's SFT output folder)")
    p.add_argument("--compare", nargs="+", choices=["digit", "gridsim", "reverse-text", "reasoning-gym"],
                   default=None,
                   help="side-by-side prime-rl vs TRL runs of these workloads (see the module docstring)")
    p.add_argument("--gridsim-model", type=Path, default=None, help="--compare gridsim: the SFT model to start from")
    p.add_argument("--reasoning-gym-model", type=Path, default=None,
                   help="--compare reasoning-gym: the SFT model to start from (examples/reasoning_gym/sft.toml's output)")
    p.add_argument("--prime-run", type=Path, default=None,
                   help="--compare with one workload: measure this finished rl run of it instead of running rl again")
    p.add_argument("--eval-examples", type=int, default=None,
                   help="--compare: eval tasks per source for both sides (default: each config's own)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--parallel-sampling", action="store_true",
                   help="--compare: run prime-rl with client.parallel_sampling (a group's prompt as one request with n)")
    p.add_argument("--async-level", type=int, default=None,
                   help="--compare: prime-rl's orchestrator.max_async_level (default: the workload config's)")
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "peer-trl")
    p.add_argument("--data-dir", type=Path, default=None, help="a folder of ERCOT NP4-180-ER files (default: the packaged 2021-2024 days)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default 50; --compare: per workload)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-completion-tokens", type=int, default=192)
    p.add_argument("--eval-days", type=int, default=None, help="default: all 200 eval days")
    p.add_argument("--eval-rollouts", type=int, default=4)
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `finally` that stops the inference server
    if args.compare:
        return compare(args)
    if args.model is None:
        p.error("--model is required (unless --compare)")
    args.steps = args.steps or 50
    args.model, args.out = args.model.resolve(), args.out.resolve()
    if args.data_dir:
        args.data_dir = args.data_dir.resolve()
    py = ensure_trl_venv()
    base = score(args.model, args, args.out / "eval-start")
    bm, bse = mean_se(list(base.values()))
    print(f"start model {args.model}: eval {bm:.4f} +- {bse:.4f} ({len(base)} days)", flush=True)
    results = []
    for seed in args.seeds:
        run = args.out / f"seed{seed}"
        t0 = time.monotonic()
        s = train_trl(py, args, seed, run)
        ev = score(run / "model", args, run / "eval")
        days = sorted(set(ev) & set(base))
        m, se = mean_se([ev[d] for d in days])
        dm, dse = mean_se([ev[d] - base[d] for d in days])
        res = {"seed": seed, "eval": m, "eval_se": se, "diff": dm, "diff_se": dse, "train_s": s["train_s"],
               "s_per_step": s["train_s"] / args.steps, "wall_s": time.monotonic() - t0, "settings": s["settings"],
               "train_reward": s["train_reward"]}  # fmt: skip
        results.append(res)
        print(f"TRL seed {seed}: {s['train_s']:.0f} s training ({res['s_per_step']:.1f} s/step), eval {m:.4f} +- "
              f"{se:.4f}, minus start {dm:+.4f} +- {dse:.4f} ({dm / dse if dse else float('nan'):.1f} SE)", flush=True)
    summary = {"start_eval": bm, "start_eval_se": bse, "runs": results}
    if results:
        gains = [r["diff"] for r in results]
        summary["mean_gain"] = sum(gains) / len(gains)
        print(f"mean gain over {len(gains)} seeds: {summary['mean_gain']:+.4f}")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


def compare(args: argparse.Namespace) -> int:
    """`--compare`: each workload on prime-rl, then on TRL (same model and settings), one table each."""
    import platform

    import _peer_compare as pc

    out = args.out.resolve()
    py = ensure_trl_venv()
    ws = pc.workloads(args)
    if args.prime_run and len(args.compare) != 1:
        print(f"--prime-run {args.prime_run} is one workload's rl run: give one --compare workload, not "
              f"{args.compare}", file=sys.stderr)
        return 2
    tables, results = [], {}
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}, shared with other jobs"
    for name in args.compare:
        w = ws[name]
        model = pc.model_for(w, args)
        if model is None:
            print(f"{name}: skipped (give --{name}-model, the SFT model to start from)", flush=True)
            continue
        steps = args.steps or w.steps
        seed = args.seeds[0]
        if args.eval_examples:
            w.rl_args += ["--orchestrator.eval.num-examples", str(args.eval_examples)]
        if args.parallel_sampling:
            w.rl_args += [pc.PARALLEL_FLAG, "true"]
        if args.async_level is not None:
            w.rl_args += [pc.ASYNC_FLAG, str(args.async_level)]
        if args.prime_run:
            prime = pc.reuse_prime(args.prime_run.resolve())
        else:
            prime = pc.run_prime(w, model, steps, seed, out / name)
        print(f"{name}: prime-rl {prime['step_s']:.3f} s/step, eval {prime['eval'][0]:.3f}", flush=True)
        trl = pc.train_trl(py, w, model, steps, seed, out / name / "trl")
        trl["eval"] = pc.score_trl(out / name / "trl" / "model", prime["orchestrator_config"], out / name / "trl-eval")
        print(f"{name}: TRL {trl['step_s']:.3f} s/step, eval {trl['eval'][0]:.3f}", flush=True)
        tables.append(pc.table(w, model, steps, prime, trl))
        prime.pop("orchestrator_config")
        results[name] = {"prime-rl": prime, "trl": trl, "model": str(model), "steps": steps, "seed": seed}
    text = f"machine: {machine}\n\n" + "\n\n".join(tables)
    print(text)
    (out / "compare.md").write_text(text + "\n")
    (out / "compare.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
