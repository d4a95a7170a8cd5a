"""Orchestrator throughput: is the control plane ever the bottleneck?

1. Rollouts per second of the orchestrator alone (scheduler, agent loop with rendering and tool parsing, GridSim
   tools and verify in-process, advantages, packing, writing rank files) against a stub inference server that
   answers every generate request instantly over real HTTP (the real `InferenceClient`), next to the same loop
   with an in-process stub client (no HTTP), as a ratio measured in one run, and over HTTP again with
   `client.parallel_sampling` (a group's first turn as one request with n samples). Rollouts/s are over steps 2..N
   (steady state; the whole run's wall time is printed too), with the orchestrator process's CPU per rollout over
   the same steps and over the whole run (start-up included).
2. Step time with `max_async_level = 0` versus 1 with a simulated trainer (fixed seconds per step) and simulated
   inference latency, as a ratio measured in one run.
3. The same comparison on the real stack: the tiny model (128x2; GridSim in-process) or, with `--real-model
   smollm2`, SmolLM2-135M-Instruct (reverse-text in-process: inference-heavy) served by one vLLM server, the real
   trainer and orchestrator processes (`python -m prime_rl.cli.trainer|orchestrator`, world size 1), a few steps
   with `max_async_level` 0 and then 1 on the same server (base weights reloaded in between); time per RL step
   (trainer publish to publish) and orchestrator step time over steps 2..N, side by side as a ratio. A few
   minutes on CPU (`--no-real` skips it).

Usage: python benchmarks/orchestrator.py [--steps 10] [--batch-size 64] [--group-size 8] [--max-inflight 64]
       [--train-s 0.3] [--latency-s 0.05] [--real-model tiny|smollm2] [--real-steps 5] [--real-batch-size 16]
       [--real-max-tokens 64] [--no-real | --real-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prime_rl.config.orchestrator import ClientConfig, OrchestratorConfig  # noqa: E402
from prime_rl.models.renderer import load_tokenizer, make_renderer  # noqa: E402
from prime_rl.orchestrator.main import Orchestrator  # noqa: E402
from prime_rl.orchestrator.sources import build_source  # noqa: E402
from prime_rl.transport.atomic import atomic_write_dir  # noqa: E402

SCHEDULE = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0]


VARIANTS = 8  # first-turn answers differ by member (the schedule rotated by v hours), so second-turn prompts differ


def completion_ids(tok, k: int, variant: int = 0) -> list[int]:
    schedule = SCHEDULE[variant:] + SCHEDULE[:variant]
    text = '<tool_call>\n{"name": "submit_schedule", "arguments": {"schedule": ' + json.dumps(schedule) + "}}\n</tool_call>"
    if k % 2:
        text = "Submitted."
    return tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


class InstantClient:
    """In-process stub: answers at once (a tool call on the first turn, one of `VARIANTS` schedules in turn; a final
    text on the second)."""

    def __init__(self, tok, latency_s: float = 0.0):
        self.tok, self.latency_s, self.version, self.n = tok, latency_s, 0, 0
        self.first = [completion_ids(tok, 0, v) for v in range(VARIANTS)]
        self.second = completion_ids(tok, 1)

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        from prime_rl.inference.backend import GenerateResult

        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        second = 261 in prompt_ids  # <tool_response> in the prompt: second turn
        ids = self.second if second else self.first[self.n % VARIANTS]
        self.n += 1
        return GenerateResult(list(prompt_ids), ids, [-0.5] * len(ids), "stop", self.version)

    async def update_weights(self, path, version):
        self.version = version

    def check_alive(self):
        return None

    async def context_length(self):
        return None


STUB = r"""
import sys, json
import uvicorn
ids = json.loads(sys.argv[2])
# the two answers, encoded once: this stub measures the orchestrator, not a server's JSON encoding
first, second = ids  # first-turn answers (one per variant), the second turn's
CHOICES = [[{"token_ids": out, "finish_reason": "stop",
             "logprobs": {"content": [{"token_id": t, "logprob": -0.5} for t in out]}} for out in first],
           [{"token_ids": second, "finish_reason": "stop",
             "logprobs": {"content": [{"token_id": t, "logprob": -0.5} for t in second]}}]]
ANSWERS = {}  # (turn, first variant, n) -> the answer, encoded on first use
count = [0]


def answer(turn, n):
    # the first turn answers variant (count + i) for choice i, as the in-process stub does per call
    v = count[0] % len(CHOICES[0]) if turn == 0 else 0
    count[0] += n if turn == 0 else 0
    key = (turn, v, n)
    if key not in ANSWERS:
        opts = CHOICES[turn]
        ANSWERS[key] = json.dumps({"choices": [dict(opts[(v + i) % len(opts)], index=i) for i in range(n)]}).encode()
    return ANSWERS[key]


HEAD = [(b"content-type", b"application/json")]

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        m = await receive()
        chunks.append(m.get("body", b""))
        if not m.get("more_body"):
            break
    body = b"{}"
    if scope["path"] == "/inference/v1/generate":
        req = json.loads(b"".join(chunks))
        n = req["sampling_params"].get("n", 1)
        body = answer(1 if 261 in req["token_ids"] else 0, n)  # <tool_response> in the prompt: second turn
    await send({"type": "http.response.start", "status": 200, "headers": HEAD})
    await send({"type": "http.response.body", "body": body})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False, loop="uvloop",
            http="httptools")
"""


def stub_server(tok):
    """A stub of `/inference/v1/generate` (and any other route: `{}`) in its own process, answering at once: a bare
    ASGI app on uvicorn (uvloop, httptools) with pre-encoded answers, so the server's own cost stays small."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ids = json.dumps([[completion_ids(tok, 0, v) for v in range(VARIANTS)], completion_ids(tok, 1)])
    proc = subprocess.Popen([sys.executable, "-c", STUB, str(port), ids], stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


async def run_once(args, client, renderer, *, async_level: int, train_s: float, tag: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cfg = OrchestratorConfig(
            output_dir=Path(d) / "run", batch_size=args.batch_size, max_steps=args.steps, seq_len=4096,
            max_async_level=async_level, train={"group_size": args.group_size, "source": [{"env": {"id": "gridsim"}}]},
            concurrency={"max_inflight": args.max_inflight}, traces_per_step=2,
        )
        sources = [build_source(s) for s in cfg.train.source]

        cpu_after_step1: list[float] = []

        async def trainer():
            for n in range(1, args.steps + 1):
                p = cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
                while not p.exists():
                    await asyncio.sleep(0.002)
                if n == 1:
                    cpu_after_step1.append(time.process_time())
                await asyncio.sleep(train_s)
                atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda x: (x / "w").write_bytes(b""))

        orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=sources, poll_s=0.002, echo=False)
        t = asyncio.create_task(trainer())
        t0, c0 = time.perf_counter(), time.process_time()
        out = await orch.run()
        c1 = time.process_time()
        wall, cpu = time.perf_counter() - t0, c1 - c0
        await t
    n = args.steps * args.batch_size
    steady = sum(m["step_time_s"] for m in out[1:])  # steps 2..N: start-up (sources, first step) excluded
    # CPU over the same steps 2..N (from the moment step 1's file appears); `cpu_ms` is the whole run's, start-up
    # (GridSim's task list, the GC freeze, prompt-length checks: ~1 s) included
    steady_cpu = (c1 - cpu_after_step1[0]) / max(1, (len(out) - 1) * args.batch_size) if cpu_after_step1 else cpu / n
    return {"tag": tag, "rollouts_per_s": (len(out) - 1) * args.batch_size / steady, "wall_s": wall,
            "cpu_ms": cpu / n * 1e3, "steady_cpu_ms": steady_cpu * 1e3, "step_s": steady / max(1, len(out) - 1)}


def real_stack_run(server, model: Path, tmp: Path, args, async_level: int) -> dict:
    """One real run (trainer + orchestrator subprocesses against `server`); step times from metrics.jsonl."""
    from tests.integration.stack import PY, orchestrator_toml, reset_policy, start, stop, trainer_toml, wait_all

    from prime_rl.monitor.metrics import read_metrics

    reset_policy(server.base_url, model)
    run, seq_len = tmp / f"async{async_level}", 2048
    tcfg = trainer_toml(tmp / f"trainer{async_level}.toml", run=run, model=model, seq_len=seq_len,
                        max_steps=args.real_steps, lr=1e-5)  # fmt: skip
    source = ('name = "reverse-text"\nenv.id = "reverse-text"\nenv.agent.max_turns = 1' if args.real_model == "smollm2"
              else 'name = "gridsim"\nenv.id = "gridsim"\nenv.agent.max_turns = 2')  # fmt: skip
    ocfg = orchestrator_toml(
        tmp / f"orchestrator{async_level}.toml", run=run, model=model, base_url=server.base_url, source=source,
        batch_size=args.real_batch_size, group_size=4, max_tokens=args.real_max_tokens, seq_len=seq_len,
        max_steps=args.real_steps, async_level=async_level,
    )
    logs = {n: tmp / f"{n}{async_level}.out" for n in ("trainer", "orchestrator")}
    t0 = time.perf_counter()
    procs = {
        "trainer": (start([PY, "-m", "prime_rl.cli.trainer", "@", str(tcfg)], logs["trainer"]), logs["trainer"]),
        "orchestrator": (start([PY, "-m", "prime_rl.cli.orchestrator", "@", str(ocfg)], logs["orchestrator"]),
                         logs["orchestrator"]),
    }  # fmt: skip
    try:
        wait_all(procs, timeout_s=900)
    finally:
        for p, _ in procs.values():
            stop(p)
    wall = time.perf_counter() - t0
    orch, trainer = read_metrics(run, "orchestrator")[1:], read_metrics(run, "trainer")
    period = (trainer[-1]["time"] - trainer[0]["time"]) / (len(trainer) - 1)  # publish to publish, steps 2..N
    trainer = trainer[1:]
    return {
        "period_s": period,
        "step_s": sum(r["step_time_s"] for r in orch) / len(orch),
        "train_s": sum(r["step_time_s"] for r in trainer) / len(trainer),
        "wait_s": sum(r["wait_s"] for r in orch) / len(orch),
        "off_policy": max(r["max_off_policy"] for r in orch),
        "wall_s": wall,
    }


def real_stack(args) -> None:
    from prime_rl.inference.testing import start_server
    from prime_rl.models.tiny import cached_tiny_model

    if args.real_model == "smollm2":
        from prime_rl.models.smollm import cached_smollm

        model, what = cached_smollm(), "SmolLM2-135M-Instruct on vLLM, real trainer, reverse-text"
    else:
        model, what = cached_tiny_model(), "tiny model 128x2 on vLLM, real trainer, GridSim"
    print(f"# real stack: {what}; {args.real_steps} steps x {args.real_batch_size} rollouts, <= "
          f"{args.real_max_tokens} tokens per turn (mean over steps 2..N)")  # fmt: skip
    with tempfile.TemporaryDirectory() as d, start_server(model, log_path=Path(d) / "vllm.log") as server:
        res = {a: real_stack_run(server, model, Path(d), args, a) for a in (0, 1)}
    for a, r in res.items():
        print(f"{'max_async_level=' + str(a):>20}: RL step {r['period_s']:.2f} s (trainer publish to publish) | "
              f"orchestrator step {r['step_s']:.2f} s, of it waiting {r['wait_s']:.2f} s | trainer compute "
              f"{r['train_s']:.2f} s/step | max off-policy {r['off_policy']} | run {r['wall_s']:.0f} s")  # fmt: skip
    print(f"{'ratio':>20}: RL step time async=0 / async=1 = {res[0]['period_s'] / res[1]['period_s']:.2f}"
          f" (orchestrator step time: {res[0]['step_s'] / res[1]['step_s']:.2f})")  # fmt: skip
    print("  (async=1 overlaps sampling step N+1 with training step N; here vLLM and the trainer share the same CPU"
          " cores, which bounds the gain)")


async def main_async(args):
    from prime_rl.config.orchestrator import RendererConfig
    from prime_rl.models.tiny import cached_tiny_model

    tok = load_tokenizer(cached_tiny_model())

    renderer = make_renderer(tok, RendererConfig())
    print(f"# orchestrator control plane: {args.steps} steps x {args.batch_size} rollouts (GridSim, 2 turns each)")
    inproc = await run_once(args, InstantClient(tok), renderer, async_level=1, train_s=0.0, tag="in-process stub")
    from prime_rl.inference.client import InferenceClient

    proc, url = stub_server(tok)
    try:
        client = InferenceClient(ClientConfig(base_url=[url]))
        await client.wait_healthy(60)
        http = await run_once(args, client, renderer, async_level=1, train_s=0.0, tag="HTTP stub server")
        await client.aclose()
        client = InferenceClient(ClientConfig(base_url=[url], parallel_sampling=True))
        par = await run_once(args, client, renderer, async_level=1, train_s=0.0, tag="HTTP, parallel_sampling")
        sent = f"{client._parallel.requests} requests for {client._parallel.samples} samples"
        await client.aclose()
    finally:
        proc.terminate()
        proc.wait(10)
    for r in (inproc, http, par):
        print(f"{r['tag']:>24}: {r['rollouts_per_s']:8.1f} rollouts/s  ({r['wall_s']:.2f} s; orchestrator CPU "
              f"{r['steady_cpu_ms']:.2f} ms/rollout over steps 2..N, {r['cpu_ms']:.2f} over the whole run)")
    print(f"{'ratio':>24}: HTTP / in-process = {http['rollouts_per_s'] / inproc['rollouts_per_s']:.2f}; "
          f"HTTP with / without client.parallel_sampling = {par['rollouts_per_s'] / http['rollouts_per_s']:.2f} "
          f"({sent})")

    print(f"# async level: simulated trainer {args.train_s} s/step, inference latency {args.latency_s} s/turn")
    res = {}
    for a in (0, 1):
        res[a] = await run_once(args, InstantClient(tok, args.latency_s), renderer, async_level=a, train_s=args.train_s, tag=f"async={a}")
        print(f"{'max_async_level=' + str(a):>20}: {res[a]['step_s']:.3f} s/step")
    print(f"{'ratio':>20}: step time async=0 / async=1 = {res[0]['step_s'] / res[1]['step_s']:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-inflight", type=int, default=64)
    p.add_argument("--train-s", type=float, default=0.3)
    p.add_argument("--latency-s", type=float, default=0.05)
    p.add_argument("--real-model", choices=["tiny", "smollm2"], default="tiny")
    p.add_argument("--real-steps", type=int, default=5)
    p.add_argument("--real-batch-size", type=int, default=16)
    p.add_argument("--real-max-tokens", type=int, default=64)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--no-real", action="store_true", help="skip the real-stack comparison (vLLM + trainer)")
    g.add_argument("--real-only", action="store_true", help="only the real-stack comparison")
    args = p.parse_args()
    if not args.real_only:
        asyncio.run(main_async(args))
    if not args.no_real:
        real_stack(args)


if __name__ == "__main__":
    main()
