"""The `inference` command as the launcher runs it: healthy, then SIGTERM stops it and every vLLM child promptly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from prime_rl.ports import free_port


@pytest.mark.slow
def test_sigterm_stops_wrapper_and_engine(tiny_model_dir, tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "prime_rl.cli.inference", "--model.name", str(tiny_model_dir),
         "--server.port", str(port), "--output-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (tmp_path / "logs" / "vllm.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "inference never became healthy"
            time.sleep(0.5)
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
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
