"""Side-by-side runs of `benchmarks/peer_trl.py --compare`: prime-rl's `rl` and TRL's `GRPOTrainer` on the same
workload, model and settings, each measured the same way (this module; the TRL side runs `_peer_trl_worker.py`).

Per side: wall-clock per RL step (median over steps 2..N: prime-rl publish to publish, TRL optimizer step to step,
each including its sampling), rollouts/s (rollouts per step / step time), trained tokens/s (prompt + completion
tokens of a step / step time), peak memory of each process (prime-rl: RSS of every process of the run sampled twice
a second and summed per role, vLLM's engine processes counted with the inference server; TRL: its one process's
peak RSS), the eval reward after the last step (mean over eval tasks of each task's mean over its rollouts, with the
standard error over tasks), and the whole run's wall time. Both final models are scored by the same eval: prime-rl's
`run_eval` through a vLLM server with the `[orchestrator.eval]` settings of the prime-rl run (its own final eval;
TRL's model through `prime-rl eval` with those settings).
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("_peer_trl_worker.py")


@dataclass
class Workload:
    """One comparison: the prime-rl config (+ flags) and the TRL worker's settings, which must describe the same run.

    `trl` maps worker flags to values (prompts per step, group size, lr, scheduler, temperature, max completion
    tokens, max grad norm, renderer); `steps` is both sides' number of optimizer steps."""

    name: str
    env_id: str
    config: Path
    steps: int
    rl_args: list[str]
    trl: dict[str, object]
    env_args: dict = field(default_factory=dict)


PARALLEL_FLAG = "--orchestrator.client.parallel-sampling"  # `--parallel-sampling` of peer_trl.py adds it (+ true)
ASYNC_FLAG = "--orchestrator.max-async-level"  # `--async-level N` of peer_trl.py adds it (+ N)


def workloads(args) -> dict[str, Workload]:
    """The workloads of `--compare` (models resolved lazily by `model_for`); reasoning-gym's task settings
    (`env.args`) are read from its config, so both sides train on the same items."""
    digit = Workload(
        "digit", "digit-bandit", REPO / "examples/ladder/digit.toml", 40, [],
        {"prompts-per-step": 8, "group-size": 8, "lr": 3e-3, "scheduler": "constant", "temperature": 1.0,
         "max-completion-tokens": 2, "max-grad-norm": 1.0, "renderer": "auto"},
    )  # fmt: skip
    gridsim = Workload(
        "gridsim", "gridsim", REPO / "benchmarks/peer/gridsim_first_turn.toml", 50, [],
        {"prompts-per-step": 4, "group-size": 8, "lr": 1e-4, "scheduler": "cosine", "temperature": 0.5,
         "max-completion-tokens": 192, "max-grad-norm": 1.0, "renderer": "qwen3"},
    )  # fmt: skip
    reverse = Workload(
        "reverse-text", "reverse-text", REPO / "examples/reverse_text/rl.toml", 30, [],
        {"prompts-per-step": 8, "group-size": 8, "lr": 2e-5, "scheduler": "constant", "temperature": 1.0,
         "max-completion-tokens": 64, "max-grad-norm": 1.0, "renderer": "auto"},
    )  # fmt: skip
    rg_config = REPO / "examples/reasoning_gym/rl.toml"
    (rg_source,) = tomllib.loads(rg_config.read_text())["orchestrator"]["train"]["source"]
    rgym = Workload(
        "reasoning-gym", "reasoning-gym", rg_config, 30, [],
        {"prompts-per-step": 8, "group-size": 8, "lr": 2e-5, "scheduler": "constant", "temperature": 1.0,
         "max-completion-tokens": 32, "max-grad-norm": 1.0, "renderer": "auto"},
        env_args=rg_source["env"]["args"],
    )  # fmt: skip
    return {w.name: w for w in (digit, gridsim, reverse, rgym)}


def model_for(w: Workload, args) -> Path | None:
    """The starting model: the random tiny 64x2 model (digit), `--gridsim-model` (an SFT model that can call the
    tool; None skips the workload), `--reasoning-gym-model` (the SFT model of examples/reasoning_gym/sft.toml; None
    skips it), SmolLM2-135M-Instruct (reverse-text)."""
    if w.name == "reasoning-gym":
        return Path(args.reasoning_gym_model).resolve() if args.reasoning_gym_model else None
    if w.name == "digit":
        from prime_rl.models.tiny import cached_tiny_model

        return cached_tiny_model(hidden=64, layers=2, seed=0)
    if w.name == "gridsim":
        return Path(args.gridsim_model).resolve() if args.gridsim_model else None
    from prime_rl.models.smollm import cached_smollm

    return cached_smollm()


class MemorySampler:
    """Peak RSS (GiB) per role of a process tree, sampled every `period_s` in a thread (summed over a role's
    processes at each sample)."""

    ROLES = (("vllm", "inference"), ("inference", "inference"), ("EngineCore", "inference"),
             ("cli.trainer", "trainer"), ("torch.distributed.run", "trainer"), ("cli.orchestrator", "orchestrator"),
             ("env_server", "env-server"))  # fmt: skip

    def __init__(self, pid: int, period_s: float = 0.5):
        self.pid, self.period_s, self.peak = pid, period_s, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _role(self, proc) -> str | None:
        try:
            cmd = " ".join(proc.cmdline())
        except Exception:  # noqa: BLE001 - the process ended meanwhile
            return None
        return next((role for key, role in self.ROLES if key in cmd), None)

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            now: dict[str, float] = {}
            try:
                kids = root.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for k in kids:
                role = self._role(k)
                if role is None:
                    continue
                try:
                    now[role] = now.get(role, 0.0) + k.memory_info().rss / 2**30
                except psutil.Error:
                    pass
            for r, v in now.items():
                self.peak[r] = max(self.peak.get(r, 0.0), v)
            self._stop.wait(self.period_s)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def mean_se(x: list[float]) -> tuple[float, float]:
    n = len(x)
    m = sum(x) / n
    var = sum((v - m) ** 2 for v in x) / (n - 1) if n > 1 else 0.0
    return m, math.sqrt(var / n)


def task_means(rows: list[dict]) -> list[float]:
    """Per eval task, the mean reward over its rollouts (rows of an `eval/step_N.jsonl`)."""
    return [sum(r["rewards"]) / len(r["rewards"]) for r in rows if r.get("rewards")]


def run_prime(w: Workload, model: Path, steps: int, seed: int, out: Path) -> dict:
    """One `rl` run of the workload; returns its measurements (see the module docstring)."""
    from prime_rl.ports import free_port

    port = free_port()
    run = out / "prime-rl"
    argv = [str(Path(sys.executable).with_name("rl")), "@", str(w.config), "--model.name", str(model),
            "--model.dtype", "float32",  # TRL's side trains in fp32 too
            "--output-dir", str(run), "--clean", "--max-steps", str(steps), "--inference.server.port", str(port),
            "--orchestrator.client.base-url", f'["http://127.0.0.1:{port}"]', "--trainer.seed", str(seed),
            "--orchestrator.seed", str(seed), "--orchestrator.train.sampling.seed", str(seed), *w.rl_args]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(out / "prime-rl.log", "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        mem = MemorySampler(proc.pid)
        try:
            rc = proc.wait()
        finally:
            peak = mem.stop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(60)
    if rc != 0:
        raise RuntimeError(f"rl exited {rc}; see {out / 'prime-rl.log'}")
    return measure_prime(run, time.monotonic() - t0, peak)


def reuse_prime(run: Path) -> dict:
    """The measurements of a finished `rl` run of the workload (`--prime-run`), instead of a new one: peak memory is
    not known (left empty) and the wall time is the span from the run's resolved configs (written at start) to its
    last eval file.

    Raises:
        FileNotFoundError: `run` has no configs/orchestrator.toml or no eval/step_N.jsonl.
    """
    start = (run / "configs" / "orchestrator.toml").stat().st_mtime
    evals = list((run / "eval").glob("step_*.jsonl"))
    if not evals:
        raise FileNotFoundError(f"{run / 'eval'}: no step_N.jsonl (is {run} a finished rl run?)")
    return measure_prime(run, max(p.stat().st_mtime for p in evals) - start, {})


def measure_prime(run: Path, wall: float, peak: dict[str, float]) -> dict:
    """Step time, rates, eval after the last step and train rewards of the `rl` run in `run` (module docstring)."""
    from prime_rl.monitor.metrics import read_metrics

    trainer, orch = read_metrics(run, "trainer"), read_metrics(run, "orchestrator")
    periods = [b["time"] - a["time"] for a, b in zip(trainer, trainer[1:], strict=False)]
    step_s = statistics.median(periods)
    cfg = tomllib.loads((run / "configs" / "orchestrator.toml").read_text())
    evals = sorted((run / "eval").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    rows = [json.loads(line) for line in evals[-1].read_text().splitlines()]
    return {"step_s": step_s, "rollouts_per_step": cfg["batch_size"], "parts": step_parts(trainer, orch),
            "tokens_per_step": statistics.median(r["tokens"] for r in trainer[1:]), "peak_gib": peak,
            "eval": mean_se(task_means(rows)), "eval_step": int(evals[-1].stem.split("_")[1]), "wall_s": wall,
            "train_reward": [r["reward"] for r in orch], "orchestrator_config": cfg}  # fmt: skip


PARTS = (("trainer", "data_wait_s", "trainer: waiting for its batch"),
         ("trainer", "step_time_s", "trainer: forward, backward, optimizer"),
         ("trainer", "publish_s", "trainer: publishing the policy version"),
         ("orchestrator", "step_time_s", "orchestrator: one step (sampling, scoring, packing)"),
         ("orchestrator", "wait_s", "orchestrator: waiting for rollouts at the cut"),
         ("orchestrator", "weight_load_s", "orchestrator: vLLM weight update (last load)"))  # fmt: skip


def step_parts(trainer: list[dict], orch: list[dict]) -> dict[str, float]:
    """Median seconds of each part of a prime-rl step over steps 2..N (`PARTS`: metrics.jsonl fields of the trainer
    and orchestrator rows); a part absent from the rows is left out."""
    rows = {"trainer": trainer[1:], "orchestrator": orch[1:]}
    out = {}
    for proc, key, label in PARTS:
        vals = [r[key] for r in rows[proc] if isinstance(r.get(key), int | float)]
        if vals:
            out[label] = statistics.median(vals)
    return out


def train_trl(py: Path, w: Workload, model: Path, steps: int, seed: int, out: Path) -> dict:
    """The TRL worker on the workload; returns its measurements (eval added by `score_trl`)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(py), str(WORKER), "--workload", w.env_id if w.env_id != "digit-bandit" else "digit", "--model",
           str(model), "--out", str(out), "--seed", str(seed), "--steps", str(steps)]  # fmt: skip
    for k, v in w.trl.items():
        cmd += [f"--{k}", str(v)]
    if w.env_args:
        cmd += ["--env-args", json.dumps(w.env_args)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    t0 = time.monotonic()
    with open(out / "trl.log", "wb") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"TRL worker exited {r.returncode}; see {out / 'trl.log'}")
    s = json.loads((out / "summary.json").read_text())
    toks = s["num_tokens"]
    per_step_tokens = [b - a for a, b in zip([0, *toks], toks, strict=False)]
    return {"step_s": statistics.median(s["step_s"][1:] or s["step_s"]), "rollouts_per_step": s["completions_per_step"],
            "tokens_per_step": statistics.median(per_step_tokens[1:] or per_step_tokens),
            "peak_gib": {"trainer (one process)": s["peak_rss_gib"]}, "wall_s": time.monotonic() - t0,
            "train_s": s["train_s"], "train_reward": s["train_reward"], "settings": s["settings"]}  # fmt: skip


def trl_eval_config(model: Path, orch_cfg: dict, out: Path, port: int) -> dict:
    """The `prime-rl eval` config that scores TRL's `model` as the prime-rl run (its resolved orchestrator config
    `orch_cfg`) evaluated: its `[eval]` settings without the interval, and its eval sources, or, when it set none,
    its train sources as the run evaluated them (name and environment only: a train source's ratio, group size,
    advantage, length penalty and sampling are train settings an eval source refuses or does not use)."""
    ev = dict(orch_cfg["eval"])
    ev.pop("interval", None)
    ev["source"] = ev.get("source") or [{k: v for k, v in src.items() if k in ("name", "env")}
                                        for src in orch_cfg["train"]["source"]]  # fmt: skip
    return {"output_dir": str(out), "seq_len": orch_cfg["seq_len"], "seed": 0, "model": {"name": str(model)},
            "client": {"base_url": [f"http://127.0.0.1:{port}"]}, "renderer": orch_cfg["renderer"], "eval": ev}  # fmt: skip


def score_trl(model: Path, orch_cfg: dict, out: Path) -> tuple[float, float]:
    """`prime-rl eval` of `model` through a vLLM server with the prime-rl run's eval settings; (mean, SE) over tasks."""
    import tomli_w

    from prime_rl.ports import free_port

    port = free_port()
    bin_dir = Path(sys.executable).parent
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.toml").write_text(tomli_w.dumps(trl_eval_config(model, orch_cfg, out, port)))
    server = subprocess.Popen([str(bin_dir / "inference"), "--model.name", str(model), "--model.dtype", "float32",
                               "--server.port", str(port), "--output-dir", str(out)],
                              stdout=open(out / "inference.log", "wb"),
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        with open(out / "eval.log", "wb") as f:
            r = subprocess.run([str(bin_dir / "prime-rl"), "eval", "@", str(out / "eval.toml")], stdout=f,
                               stderr=subprocess.STDOUT, cwd=REPO)  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"prime-rl eval exited {r.returncode}; see {out / 'eval.log'}")
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    result = next(out.glob("*/step_0.jsonl"))  # evals writes output_dir/<model key>/step_0.jsonl
    rows = [json.loads(line) for line in result.read_text().splitlines()]
    return mean_se(task_means(rows))


def table(w: Workload, model: Path, steps: int, prime: dict, trl: dict) -> str:
    """The side-by-side table (markdown) of one workload, ratios prime-rl / TRL (step time: TRL / prime-rl)."""

    def rate(r: dict, key: str) -> float:
        return r[key] / r["step_s"]

    def mem(r: dict) -> str:
        return ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["peak_gib"].items()))

    p_eval, t_eval = prime["eval"], trl["eval"]
    lines = [
        f"### {w.name}: {model.name}, {steps} steps, {prime['rollouts_per_step']} rollouts/step"
        + ("; prime-rl with client.parallel_sampling" if PARALLEL_FLAG in w.rl_args else "")
        + (f"; prime-rl max_async_level {w.rl_args[w.rl_args.index(ASYNC_FLAG) + 1]}" if ASYNC_FLAG in w.rl_args else ""),
        "",
        "| | prime-rl | TRL | prime-rl / TRL |",
        "|---|---|---|---|",
        f"| s per RL step (median, steps 2..N; lower is better) | {prime['step_s']:.3f} | {trl['step_s']:.3f} | "
        f"{prime['step_s'] / trl['step_s']:.2f} |",
        f"| rollouts/s | {rate(prime, 'rollouts_per_step'):.1f} | {rate(trl, 'rollouts_per_step'):.1f} | "
        f"{rate(prime, 'rollouts_per_step') / rate(trl, 'rollouts_per_step'):.2f} |",
        f"| trained tokens/s | {rate(prime, 'tokens_per_step'):.0f} | {rate(trl, 'tokens_per_step'):.0f} | "
        f"{rate(prime, 'tokens_per_step') / rate(trl, 'tokens_per_step'):.2f} |",
        f"| peak memory (GiB RSS) | {mem(prime) or 'not measured'} | {mem(trl)} | |",
        f"| eval reward after step {steps} (mean +- SE over tasks) | {p_eval[0]:.3f} +- {p_eval[1]:.3f} | "
        f"{t_eval[0]:.3f} +- {t_eval[1]:.3f} | {p_eval[0] - t_eval[0]:+.3f} (difference) |",
        f"| whole run wall time (s) | {prime['wall_s']:.0f} (vLLM start included) | {trl['wall_s']:.0f} | |",
    ]
    if prime.get("parts"):
        lines += ["", "prime-rl step parts (median seconds over steps 2..N, from the run's metrics.jsonl):", "",
                  "| part | s |", "|---|---|"]  # fmt: skip
        lines += [f"| {k} | {v:.3f} |" for k, v in prime["parts"].items()]
    return "\n".join(lines)
