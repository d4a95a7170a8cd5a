"""The learning ladder (docs/learning.md): end-to-end `rl` runs on CPU whose target is known, so a failure is the
RL machinery's, not the model's.

Rungs (configs in examples/ladder/):
- `digit`: the one-turn digit bandit from the random tiny model (64x2, seed 0); target: final eval >= 0.9.
- `tool`: the two-turn tool bandit through the NeMo Gym resources server `rl` starts, from the tiny model
  warm-started on random-code demonstrations (tool_sft.toml; opens the safe ~1 time in 10); target: eval >= 0.9.
- `gridsim`: GridSim from step 300 of the demo's 1,000-step SFT run, with the demo's RL phase (scripts/demo.sh,
  examples/gridsim/rl.toml); target: RL closes at least half of the eval gap between SFT-300 and SFT-1000. The full
  `make demo` (SFT checkpoints every 100 steps kept) runs once per output folder, or `PRIME_RL_GRIDSIM_DEMO=DIR`
  reuses one; `DATA_DIR` (the ERCOT xlsx folder) passes through to scripts/demo.sh.

One run per RL seed (trainer, orchestrator and sampling seeds); the tiny model and the warm start are the same for
every seed. Used by tests/learning/test_ladder.py (seed 0, in `make test`) and, for the three recorded seeds,

    python -m tests.learning.ladder --rung digit --seeds 0 1 2 --out outputs/ladder

which prints one line per run and writes `ladder_<rung>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LADDER = REPO / "examples" / "ladder"
TARGET = {"digit": 0.9, "tool": 0.9, "gridsim": 0.5}  # gridsim: the share of the SFT-300 -> SFT-1000 gap closed


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(argv: list[str], log: Path, timeout_s: float) -> None:
    """Run a console command (from the venv beside this Python) with output to `log`; raise on failure."""
    exe = Path(sys.executable).with_name(argv[0])
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        r = subprocess.run([str(exe), *argv[1:]], stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=_env(),
                           timeout=timeout_s)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... exited {r.returncode}; see {log}:\n{log.read_text()[-3000:]}")


def seed_args(seed: int) -> list[str]:
    """The RL seed: trainer, orchestrator (task order) and per-request sampling seeds."""
    return ["--trainer.seed", str(seed), "--orchestrator.seed", str(seed),
            "--orchestrator.train.sampling.seed", str(seed)]  # fmt: skip


def eval_means(run: Path) -> dict[int, float]:
    """Policy version -> mean reward over every eval rollout (all sources) of `run/eval/step_N.jsonl`."""
    out = {}
    for p in sorted((run / "eval").glob("step_*.jsonl")):
        rewards = [r for line in p.read_text().splitlines() for r in json.loads(line)["rewards"]]
        out[int(p.stem.split("_")[1])] = sum(rewards) / len(rewards)
    return out


def rl_run(config: Path, model: Path, run: Path, seed: int, extra: list[str] = (), timeout_s: float = 1200) -> dict:
    """One `rl` run on free ports; returns its eval means before/after, train rewards and wall time."""
    from prime_rl.monitor.metrics import read_metrics
    from prime_rl.ports import free_port

    port = free_port()
    argv = ["rl", "@", str(config), "--model.name", str(model), "--output-dir", str(run), "--clean",
            "--inference.server.port", str(port), "--orchestrator.client.base-url", f'["http://127.0.0.1:{port}"]',
            *seed_args(seed), *extra]  # fmt: skip
    t0 = time.monotonic()
    _run(argv, run.parent / f"{run.name}.log", timeout_s)
    evals = eval_means(run)
    rows = read_metrics(run, "orchestrator")
    return {"seed": seed, "eval": evals, "first": evals[min(evals)], "last": evals[max(evals)],
            "score": evals[max(evals)], "train_reward": [r["reward"] for r in rows],
            "wall_s": time.monotonic() - t0}  # fmt: skip


def digit(out: Path, seed: int, extra: list[str] = (), tag: str = "") -> dict:
    """Rung 1: the digit bandit from the random 64x2 tiny model (`extra`: more rl flags; `tag`: run-name suffix)."""
    from prime_rl.models.tiny import cached_tiny_model

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    return rl_run(LADDER / "digit.toml", model, out / f"digit{tag}-s{seed}", seed, list(extra))


def tool_warm_start(out: Path) -> Path:
    """The tool bandit's warm start (once per `out`): random-code demonstrations, `sft @ tool_sft.toml`."""
    from prime_rl.envs.base import load_env
    from prime_rl.models.tiny import cached_tiny_model

    weights = out / "tool-sft" / "weights"
    done = sorted(weights.glob("step_*/STABLE")) if weights.is_dir() else []
    if done:
        return done[-1].parent
    data = out / "tool_sft.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("".join(json.dumps(e) + "\n" for e in load_env("tool-bandit").sft_examples("train")))
    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    _run(["sft", "@", str(LADDER / "tool_sft.toml"), "--model.name", str(model), "--data.path", str(data),
          "--output-dir", str(out / "tool-sft")], out / "tool-sft.log", 900)  # fmt: skip
    return sorted(weights.glob("step_*/STABLE"))[-1].parent


def tool(out: Path, seed: int, extra: list[str] = (), tag: str = "") -> dict:
    """Rung 2: the tool bandit through the NeMo Gym server, from the warm start (`extra`, `tag`: as `digit`)."""
    model = tool_warm_start(out)
    dataset = out / "gym-root" / "resources_servers" / "tool_bandit_v1" / "data" / "train.jsonl"
    from prime_rl.ports import free_port

    extra = ["--orchestrator.train.source", json.dumps([{
        "name": "safe", "env": {"agent": {"max_turns": 2}, "taskset": {
            "id": "nemo-gym", "dataset": str(dataset),
            "task": {"resources_url": f"http://127.0.0.1:{free_port()}"}}}}]), *extra]  # fmt: skip
    return rl_run(LADDER / "tool.toml", model, out / f"tool{tag}-s{seed}", seed, extra)


def _demo(
    out: Path, seed: int, sft_model: Path | None = None, sft_args: str = "", rl_args: str = "", timeout_s: float = 3600
) -> Path:
    """One `make demo` (scripts/demo.sh) into `out` with RL seed `seed`; `sft_model` reuses an SFT model (no SFT).
    Returns `out / "rl"`; raises with the log's tail when the script fails."""
    env = _env()
    env.update(OUT=str(out), RL_SEED=str(seed), SFT_ARGS=sft_args, RL_ARGS=rl_args,
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))  # fmt: skip
    env["FORWARD_FROM"] = ""  # the rung is recorded on GridSim's default split (eval days from every year)
    env.pop("SFT_MODEL", None)
    if sft_model is not None:
        env["SFT_MODEL"] = str(sft_model)
    log = out.parent / f"{out.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        r = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], stdout=f, stderr=subprocess.STDOUT, cwd=REPO,
                           env=env, timeout=timeout_s)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"scripts/demo.sh (OUT={out}) exited {r.returncode}; see {log}:\n{log.read_text()[-3000:]}")
    return out / "rl"


def gridsim_demo(out: Path) -> Path:
    """The GridSim rung's reference: a full `make demo` (seed 0) whose SFT run keeps a checkpoint every 100 steps; its
    RL phase's step-0 eval is SFT-1000's score. Run once per `out` (about 25-30 minutes on 2 free cores) and reused;
    `PRIME_RL_GRIDSIM_DEMO=DIR` points at an existing demo folder (e.g. outputs/demo made with the same SFT_ARGS)."""
    demo = Path(os.environ.get("PRIME_RL_GRIDSIM_DEMO") or out / "gridsim-demo")
    if not ((demo / "rl" / "eval" / "step_0.jsonl").is_file() and (demo / "sft/weights/step_300/STABLE").is_file()):
        _demo(demo, seed=0, sft_args="--publish-interval 100 --weights.keep-last 20")
    return demo


# The RL config the GridSim rung's three seeds were measured with (docs/learning.md §2): the demo's rl.toml as it was
# then (32 rollouts per step, no std normalisation, lr 1e-4, no KL penalty to the SFT model), pinned so that a change
# of the demo's defaults leaves the rung as recorded.
GRIDSIM_RUNG_ARGS = (
    "--orchestrator.batch-size", "32", "--orchestrator.concurrency.max-inflight", "32",
    "--orchestrator.advantage.std-normalize", "false", "--trainer.optim.lr", "1e-4",
    "--trainer.diagnostics.kl-to-start-interval", "1", "--trainer.loss.ref-kl-coef", "0",
)  # fmt: skip


def gridsim(out: Path, seed: int, extra: list[str] = (), tag: str = "") -> dict:
    """Rung 3: RL (the demo's config as recorded, `GRIDSIM_RUNG_ARGS`, seed `seed`) from SFT step 300; `score` is the
    share of the eval gap between SFT-300 and SFT-1000 that RL closed, (RL - SFT300) / (SFT1000 - SFT300), on the same
    200 eval days."""
    demo = gridsim_demo(out)
    full = eval_means(demo / "rl")[0]
    t0 = time.monotonic()
    rl_args = " ".join([*GRIDSIM_RUNG_ARGS, *extra])
    run = _demo(out / f"gridsim{tag}-s{seed}", seed, sft_model=demo / "sft/weights/step_300", rl_args=rl_args)
    evals = eval_means(run)
    first, last = evals[min(evals)], evals[max(evals)]
    return {"seed": seed, "eval": evals, "first": first, "last": last, "sft_1000": full,
            "score": (last - first) / (full - first), "wall_s": time.monotonic() - t0}  # fmt: skip


RUNGS = {"digit": digit, "tool": tool, "gridsim": gridsim}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run rungs of the learning ladder for several RL seeds.")
    p.add_argument("--rung", choices=sorted(RUNGS), required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "ladder")
    p.add_argument("--rl-args", default="", help='more `rl` flags, e.g. "--trainer.optim.lr 5e-4" (a variant to try)')
    p.add_argument("--tag", default="", help="suffix of the run folders (<rung><tag>-s<seed>), to keep variants apart")
    a = p.parse_args(argv)
    results: list[dict[str, Any]] = []
    for s in a.seeds:
        r = RUNGS[a.rung](a.out, s, a.rl_args.split(), a.tag)
        results.append(r)
        ok = "held" if r["score"] >= TARGET[a.rung] else "MISSED"
        print(f"{a.rung} seed {s}: eval {r['first']:.3f} -> {r['last']:.3f}, score {r['score']:.3f} "
              f"(target {TARGET[a.rung]}: {ok}), {r['wall_s']:.0f} s", flush=True)  # fmt: skip
    (a.out / f"ladder_{a.rung}{a.tag}.json").write_text(json.dumps(results, indent=1, default=str))
    return 0 if all(r["score"] >= TARGET[a.rung] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
