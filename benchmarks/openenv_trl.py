"""TRL's OpenEnv integration on GridSim: TRL 1.16's GRPOTrainer trains a model for a few steps against
`env-server openenv gridsim`, the rollouts played through openenv-core's client (no prime-rl training code).

    python benchmarks/openenv_trl.py [--model DIR] [--steps 3] [--out outputs/openenv-trl]

Starts `env-server openenv gridsim` on a free loopback port (stopped at the end), builds the tiny model when no
`--model` is given (`prime-rl tiny-model`), and runs `_openenv_trl_worker.py` in TRL's venv (made by
`benchmarks/peer_trl.py`: TRL 1.16 on top of this venv's packages, openenv-core included). TRL samples with
transformers' `generate` on the CPU (`use_vllm=False`). Prints one line per step (wall time, mean reward, how often
the model called the tool) and writes OUT/summary.json. A random tiny model almost never emits a valid
`submit_schedule` call, so its rewards are 0 (GridSim scores a day without a valid submission 0): the run shows the
integration works end to end and what a step costs, not learning; pass an SFT model (`--model`) for a signal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="default: a tiny model built in OUT/tiny-model")
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "openenv-trl")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-completion-tokens", type=int, default=64)
    p.add_argument("--qwen3-template", action="store_true",
                   help="give --model TRL's copy of Qwen3's chat template (prime-rl's tiny models: always)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peer_trl import ensure_trl_venv

    from prime_rl.ports import free_port
    from prime_rl.process import Child, ChildSpec, wait_for_http

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = args.model.resolve() if args.model else out / "tiny-model"
    if args.model is None and not (model / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "tiny-model", str(model)], check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    py = ensure_trl_venv()
    port = free_port()
    server = Child(ChildSpec("env-server", [sys.executable, "-m", "prime_rl.cli.env_server", "openenv", "gridsim",
                                            "--port", str(port)], out / "env-server.log",
                             env={"PYTHONPATH": str(REPO / "src")}))  # fmt: skip
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", server, timeout_s=300)  # openenv-core imports gradio: seconds
        cmd = [str(py), str(Path(__file__).with_name("_openenv_trl_worker.py")), "--model", str(model),
               "--url", f"http://127.0.0.1:{port}/all", "--out", str(out), "--steps", str(args.steps),
               "--prompts-per-step", str(args.prompts_per_step), "--group-size", str(args.group_size),
               "--max-completion-tokens", str(args.max_completion_tokens)]  # fmt: skip
        if args.model is None or args.qwen3_template:
            cmd.append("--qwen3-template")
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "2", "TRL_EXPERIMENTAL_SILENCE": "1"}
        with open(out / "trl.log", "wb") as f:
            r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        if r.returncode != 0:
            print(f"TRL worker exited {r.returncode}; see {out / 'trl.log'}", file=sys.stderr)
            return 1
    finally:
        server.stop()
    s = json.loads((out / "summary.json").read_text())
    for st in s["steps"]:
        print(f"step {st['step']}: {st['s']:.1f} s, mean reward {st['reward']:.4f}, tool calls per completion "
              f"{st['tools_call_frequency']}")  # fmt: skip
    print(f"TRL {s['trl']} GRPOTrainer via OpenEnv on {s['server']}: {len(s['steps'])} steps of "
          f"{s['completions_per_step']} completions in {s['train_s']:.0f} s ({s['sessions']} OpenEnv sessions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
