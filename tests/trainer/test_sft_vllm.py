"""The model `sft` publishes loads in vLLM and generates what transformers generates from the same folder; the server
is the `inference` command as the launcher runs it, so the same vLLM start-up also checks that SIGTERM stops the
wrapper and every vLLM child promptly (one vLLM start for both; each used to start its own, ~50 s on 2 cores).

The SFT run and the `inference` start happen when the trainer tests begin (`prestart_vllm`, tests/shared_vllm.py):
those run in-process on one thread, so the vLLM start-up (one core) runs beside them; the test then only waits for
what is left of it. Run alone, the test does both itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import torch
from tests.shared_vllm import PRESTART_NICE, renice_group
from tests.trainer.test_sft import reverse_demos

from prime_rl.config.trainer import SFTConfig
from prime_rl.ports import free_port
from prime_rl.trainer import sft

PRESTART_WITH = "tests/trainer/"  # tests/conftest.py: prestart when the first trainer test starts
_PRESTARTED: dict = {}


def sft_then_serve(model_dir: Path, root: Path) -> dict:
    """`sft` 4 steps on reverse demonstrations into `root/run`, then `inference` on weights/step_4 (started, not
    waited for): the folder, the process, its port and log directory."""
    data = root / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in reverse_demos(8)))
    cfg = SFTConfig(model={"name": str(model_dir)}, data={"path": str(data), "batch_size": 8},
                    output_dir=str(root / "run"), optim={"lr": 3e-3}, max_steps=4, seq_len=128, threads=1)
    sft.run(cfg)
    out = root / "run" / "weights" / "step_4"
    port = free_port()
    logs = root / "inference"
    proc = subprocess.Popen(
        [sys.executable, "-m", "prime_rl.cli.inference", "--model.name", str(out), "--server.port", str(port),
         "--output-dir", str(logs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    return {"model": model_dir, "out": out, "proc": proc, "port": port, "logs": logs}


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def prestart_vllm(shared, tmp_path_factory):
    """Called by tests/conftest.py when the first trainer test starts."""
    from prime_rl.models.tiny import cached_tiny_model

    started = sft_then_serve(cached_tiny_model(hidden=32, layers=2, seed=0), tmp_path_factory.mktemp("sft-served"))
    renice_group(started["proc"].pid, PRESTART_NICE)  # idle cycles only, until the test waits for it
    shared.on_close(lambda: _kill(started["proc"]))
    _PRESTARTED.update(started)


@pytest.mark.slow
def test_sft_output_loads_in_vllm(tiny_model_dir, tmp_path):
    """`sft` 4 steps, then `inference` on weights/step_4: vLLM's greedy completion equals transformers'; then
    SIGTERM to the wrapper: it exits 0 within 25 s (it must not wait for a SIGKILL) and no vLLM child is left."""
    from transformers import AutoModelForCausalLM

    pre = _PRESTARTED
    if pre and pre["model"] == tiny_model_dir and pre["proc"].poll() is None:
        renice_group(pre["proc"].pid, 0)  # the test waits for it now
        s = dict(pre)
    else:  # not prestarted (run alone), or the prestarted one is gone
        s = sft_then_serve(tiny_model_dir, tmp_path)
    out, proc, base_url = s["out"], s["proc"], f"http://127.0.0.1:{s['port']}"
    try:
        prompt = [257, 117, 115, 101, 114, 10, 104, 105, 258, 10, 257, 97, 115, 115, 105, 115, 116, 97, 110, 116, 10]
        model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(prompt):].tolist()
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (s["logs"] / "logs" / "vllm.log").read_text()[-3000:]
            try:
                if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "inference never became healthy"
            time.sleep(0.5)
        r = httpx.post(f"{base_url}/v1/completions", timeout=60, json={
            "model": str(out), "prompt": prompt, "max_tokens": 8, "temperature": 0.0, "return_token_ids": True,
            "ignore_eos": True})
        r.raise_for_status()
        got = r.json()["choices"][0]["token_ids"]
        assert got == ref

        family = psutil.Process(proc.pid).children(recursive=True)
        assert family, "vLLM runs in child processes"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=40)
        elapsed = time.monotonic() - t0
        assert code == 0
        assert elapsed < 25, f"stopping took {elapsed:.1f} s (the wrapper must not wait for a SIGKILL)"
        _, alive = psutil.wait_procs(family, timeout=10)
        assert not alive, f"left running: {[p.pid for p in alive]}"
    finally:
        _kill(proc)
