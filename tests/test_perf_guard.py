"""Regression guard of the control plane (issue 17): fails only on a gross slowdown, measured as a ratio of two
loops in the same run, never on an absolute time (the machine is shared and its speed varies).

- The orchestrator over HTTP to an instant stub server keeps at least a third of the rollouts/s of the same loop
  with an in-process stub client (measured 0.6-1.0 on 2 cores; 0.17 with the httpx client this replaced).
- `NemoGymClient` keeps at least a third of the rollouts/s of a raw asyncio HTTP client against the same
  `env-server serve` (measured 0.65-0.9; 0.17-0.38 with httpx).

Each side is measured twice, interleaved, and the best of each is compared, so one load spike cannot fail it.
A few seconds each (`benchmarks/orchestrator.py`, `benchmarks/env_server.py` are the full measurements).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile

import pytest

MIN_RATIO = 1 / 3


def test_orchestrator_over_http_keeps_a_third_of_the_in_process_rate():
    from benchmarks.orchestrator import InstantClient, run_once, stub_server

    from prime_rl.config.orchestrator import ClientConfig, RendererConfig
    from prime_rl.inference.client import InferenceClient
    from prime_rl.models.renderer import load_tokenizer, make_renderer
    from prime_rl.models.tiny import cached_tiny_model

    tok = load_tokenizer(cached_tiny_model())
    renderer = make_renderer(tok, RendererConfig())
    args = argparse.Namespace(steps=4, batch_size=64, group_size=8, max_inflight=64)

    async def measure() -> tuple[float, float]:
        proc, url = stub_server(tok)
        client = InferenceClient(ClientConfig(base_url=[url]))
        try:
            await client.wait_healthy(60)
            best = {"in-process": 0.0, "http": 0.0}
            for _ in range(2):
                r = await run_once(args, InstantClient(tok), renderer, async_level=1, train_s=0.0, tag="in-process")
                best["in-process"] = max(best["in-process"], r["rollouts_per_s"])
                r = await run_once(args, client, renderer, async_level=1, train_s=0.0, tag="http")
                best["http"] = max(best["http"], r["rollouts_per_s"])
            return best["in-process"], best["http"]
        finally:
            await client.aclose()
            proc.terminate()
            proc.wait(10)

    inproc, http = asyncio.run(measure())
    assert http >= MIN_RATIO * inproc, f"HTTP {http:.0f} rollouts/s vs in-process {inproc:.0f}: below {MIN_RATIO:.2f}"


def test_nemo_gym_client_keeps_a_third_of_a_raw_clients_rate():
    from benchmarks.env_server import drive, drive_raw, free_port, wait_health

    from prime_rl.envs.gridsim.baselines import greedy
    from prime_rl.envs.gridsim.env import GridSimEnv
    from prime_rl.envs.gridsim.prompts import tool_arguments
    from prime_rl.envs.nemo_gym.rows import read_rows, write_server

    env = GridSimEnv(num_train=50, num_eval=50)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_server("gridsim", tmp, env=env)
        rows = read_rows(root / "data" / "eval.jsonl")
        schedules = [tool_arguments(greedy(r["info"]["prices"], None)) for r in rows]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "prime_rl.cli.env_server", "serve", str(root), "--port",
                                 str(port), "--max-concurrent", "128"], stdout=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        try:
            wait_health(url, proc)
            asyncio.run(drive(url, rows, schedules, 32, 0.5))  # warm-up
            best = {"client": 0.0, "raw": 0.0}
            for _ in range(2):
                for name, fn in (("client", drive), ("raw", drive_raw)):
                    best[name] = max(best[name], len(asyncio.run(fn(url, rows, schedules, 32, 1.5))) / 1.5)
        finally:
            proc.terminate()
            proc.wait(10)
    if best["raw"] == 0:
        pytest.fail("the raw client finished no rollout: is env-server serve working?")
    assert best["client"] >= MIN_RATIO * best["raw"], best
