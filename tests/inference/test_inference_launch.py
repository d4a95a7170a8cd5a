"""Server launch pieces that need no engine: vLLM flags, environment, port checks (fast)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from prime_rl.config.inference import InferenceConfig
from prime_rl.inference.server import VllmServer, build_env, build_vllm_args
from prime_rl.ports import PortInUseError, check_port_free, free_port


def test_cpu_flags_and_passthrough():
    cfg = InferenceConfig(
        model={"name": "/m"},
        server={"port": 9001},
        vllm={
            "max_model_len": 1024,
            "enable_lora": True,
            "max_lora_rank": 8,
            "extra_args": {"max_num_batched_tokens": 512, "disable_log_stats": True},
        },
    )
    a = build_vllm_args(cfg, cpu=True)
    joined = " ".join(a)
    for piece in [
        "--model /m",
        "--port 9001",
        "--dtype float32",
        "--enforce-eager",
        "--logprobs-mode processed_logprobs",
        "--worker-extension-cls prime_rl.inference.worker.PrimeWorkerExtension",
        "--enable-scale-out",
        "--enable-auto-tool-choice --tool-call-parser hermes",
        "--max-model-len 1024",
        "--enable-lora --max-lora-rank 8",
        "--max-num-batched-tokens 512",
        "--disable-log-stats",
    ]:
        assert piece in joined, piece
    assert "--gpu-memory-utilization" not in joined
    gpu = build_vllm_args(cfg, cpu=False)
    assert "--enforce-eager" not in gpu and "bfloat16" in gpu and "--gpu-memory-utilization" in gpu
    env = build_env(cfg, cpu=True, base={})
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["PRIME_RL_PAUSE_MODE"] == "wait"
    assert "VLLM_CPU_KVCACHE_SPACE" not in build_env(cfg, cpu=False, base={})


@pytest.fixture
def held_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_taken_port_fails_fast_naming_port_and_holder(held_port):
    t = time.monotonic()
    with pytest.raises(PortInUseError) as e:
        check_port_free("127.0.0.1", held_port)
    assert time.monotonic() - t < 5
    msg = str(e.value)
    assert str(held_port) in msg and f"pid {os.getpid()}" in msg
    cfg = InferenceConfig(model={"name": "/m"}, server={"port": held_port})
    with pytest.raises(PortInUseError):
        VllmServer(cfg, log_path="/dev/null").start()
    check_port_free("127.0.0.1", free_port())  # a free one passes


def test_inference_cli_taken_port_exits_under_5s(held_port, tmp_path, tiny_model_dir):
    t = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "prime_rl.cli.inference",
            "--model.name",
            str(tiny_model_dir),  # a real folder: `inference` names a missing model before anything else
            "--server.port",
            str(held_port),
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - t
    # a user error: exit 2 and one line naming the port, its holder, the field and flag, and the fix (it was exit 1)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith(f"inference: error: port {held_port} on 127.0.0.1 is already in use by pid {os.getpid()} ")
    assert lines[0].endswith("; stop it or choose another port (server.port / --server.port)"), lines[0]
    assert elapsed < 5, f"took {elapsed:.1f} s"
