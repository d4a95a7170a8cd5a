"""Orchestrator throughput: is the control plane ever the bottleneck?

1. Rollouts per second of the orchestrator alone (scheduler, agent loop with rendering and tool parsing, GridSim
   tools and verify in-process, advantages, packing, writing rank files) against a stub inference server that
   answers every generate request instantly over real HTTP (the real `InferenceClient`), next to the same loop
   with an in-process stub client (no HTTP), as a ratio measured in one run.
2. Step time with `max_async_level = 0` versus 1 with a simulated trainer (fixed seconds per step) and simulated
   inference latency, as a ratio measured in one run. (The same comparison on the real tiny-model GridSim stack
   needs vLLM + trainer: run `rl` twice with `--orchestrator.max-async-level 0/1` and compare `step_time_s` in
   metrics.jsonl.)

Usage: python benchmarks/orchestrator.py [--steps 10] [--batch-size 64] [--group-size 8] [--max-inflight 64]
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
from prime_rl.models.tokenizer import write_tokenizer  # noqa: E402
from prime_rl.orchestrator.main import Orchestrator  # noqa: E402
from prime_rl.orchestrator.render import load_tokenizer, make_renderer  # noqa: E402
from prime_rl.orchestrator.sources import build_source  # noqa: E402
from prime_rl.transport.atomic import atomic_write_dir  # noqa: E402

SCHEDULE = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0]


def completion_ids(tok, k: int) -> list[int]:
    text = '<tool_call>\n{"name": "submit_schedule", "arguments": {"schedule": ' + json.dumps(SCHEDULE) + "}}\n</tool_call>"
    if k % 2:
        text = "Submitted."
    return tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


class InstantClient:
    """In-process stub: answers at once (tool call on the first turn, a final text on the second)."""

    def __init__(self, tok, latency_s: float = 0.0):
        self.tok, self.latency_s, self.version, self.n = tok, latency_s, 0, 0
        self.ids = [completion_ids(tok, 0), completion_ids(tok, 1)]

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        from prime_rl.inference.client import GenerateResult

        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        ids = self.ids[1] if 261 in prompt_ids else self.ids[0]  # <tool_response> in the prompt: second turn
        self.n += 1
        return GenerateResult(list(prompt_ids), ids, [-0.5] * len(ids), "stop", self.version)

    async def update_weights(self, path, version):
        self.version = version


STUB = r"""
import sys, json
import uvicorn
from fastapi import FastAPI, Request
ids = json.loads(sys.argv[2])
app = FastAPI()

@app.post("/inference/v1/generate")
async def generate(req: Request):
    body = await req.json()
    out = ids[1] if 261 in body["token_ids"] else ids[0]
    return {"choices": [{"token_ids": out, "logprobs": {"content": [{"token_id": t, "logprob": -0.5} for t in out]},
                         "finish_reason": "stop"}]}

@app.post("/update_weights")
async def update(req: Request):
    return {}

@app.get("/health")
async def health():
    return {}

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def stub_server(tok):
    """A stub of `/inference/v1/generate`, `/update_weights`, `/health` in its own process (answers at once)."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ids = json.dumps([completion_ids(tok, 0), completion_ids(tok, 1)])
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

        async def trainer():
            for n in range(1, args.steps + 1):
                p = cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
                while not p.exists():
                    await asyncio.sleep(0.002)
                await asyncio.sleep(train_s)
                atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda x: (x / "w").write_bytes(b""))

        orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=sources, poll_s=0.002, echo=False)
        t = asyncio.create_task(trainer())
        t0 = time.perf_counter()
        out = await orch.run()
        wall = time.perf_counter() - t0
        await t
    n = args.steps * args.batch_size
    return {"tag": tag, "rollouts_per_s": n / wall, "wall_s": wall, "step_s": sum(m["step_time_s"] for m in out[1:]) / max(1, len(out) - 1)}


async def main_async(args):
    with tempfile.TemporaryDirectory() as d:
        tok = load_tokenizer(write_tokenizer(d))
    from prime_rl.config.orchestrator import RendererConfig

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
    finally:
        proc.terminate()
        proc.wait(10)
    for r in (inproc, http):
        print(f"{r['tag']:>20}: {r['rollouts_per_s']:8.1f} rollouts/s  ({r['wall_s']:.2f} s)")
    print(f"{'ratio':>20}: HTTP / in-process = {http['rollouts_per_s'] / inproc['rollouts_per_s']:.2f}")
    print("  (for scale: vLLM samples ~4k tok/s with the 128x2 tiny model on this CPU, i.e. ~25 GridSim rollouts/s)")

    print(f"# async level: simulated trainer {args.train_s} s/step, inference latency {args.latency_s} s/turn")
    res = {}
    for a in (0, 1):
        res[a] = await run_once(args, InstantClient(tok, args.latency_s), renderer, async_level=a, train_s=args.train_s, tag=f"async={a}")
        print(f"{'max_async_level=' + str(a):>20}: {res[a]['step_s']:.3f} s/step")
    print(f"{'ratio':>20}: step time async=0 / async=1 = {res[0]['step_s'] / res[1]['step_s']:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-inflight", type=int, default=64)
    p.add_argument("--train-s", type=float, default=0.3)
    p.add_argument("--latency-s", type=float, default=0.05)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
