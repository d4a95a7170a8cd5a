"""Two local inference replicas (`rl` with `deployment.infer_replicas_per_node = 2`) on the tiny model: requests land
on both, both load every policy version until one is SIGKILLed in the middle of step 2; then the orchestrator marks
it down, retries or masks the rollouts it held (none is trained as a 0 reward), the launcher keeps the run going
on the other replica, and the run ends normally. About 3 minutes on 2 cores (two vLLM start-ups)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port, port_free

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STEPS = 4


def two_free_ports() -> int:
    for _ in range(100):
        p = free_port()
        if port_free("127.0.0.1", p + 1):
            return p
    raise RuntimeError("no two consecutive free ports")


def listener_pid(port: int) -> int | None:
    for c in psutil.net_connections(kind="inet"):
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN:
            return c.pid
    return None


def test_two_replicas_share_work_and_survive_one_dying(tmp_path):
    tiny = cached_tiny_model(hidden=64, layers=2)
    port = two_free_ports()
    run = tmp_path / "run"
    cfg = tmp_path / "rl.toml"
    cfg.write_text(f"""
output_dir = "{run}"
max_steps = {STEPS}
seq_len = 256
startup_timeout_s = 400
stop_grace_s = 10
[model]
name = "{tiny}"
[deployment]
infer_replicas_per_node = 2
[inference.server]
port = {port}
[orchestrator]
batch_size = 8
max_async_level = 0
traces_per_step = 8
[orchestrator.client]
max_retries = 2
[orchestrator.concurrency]
max_inflight = 8
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 12
[[orchestrator.train.source]]
name = "fast"
env.id = "tests.integration.fast_env:FastEnv"
[trainer]
threads = 1
[trainer.optim]
lr = 0.05
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = tmp_path / "rl.out"
    with open(out, "w") as f:
        p = subprocess.Popen([str(BIN / "rl"), "@", str(cfg)], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        orch_log = run / "logs/orchestrator.log"
        while not (orch_log.exists() and "loaded policy version 1 from" in orch_log.read_text()):
            assert p.poll() is None, out.read_text()[-4000:]
            assert time.monotonic() < deadline, out.read_text()[-4000:]
            time.sleep(0.2)
        # step 2 is being sampled now: kill replica 1 (its vLLM server's process group and its wrapper)
        victim = listener_pid(port + 1)
        assert victim is not None
        wrapper = int(re.search(r"started inference-1 \(pid (\d+)\)", (run / "logs/rl.log").read_text()).group(1))
        for pid in {victim, wrapper}:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = p.wait(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    text = out.read_text()
    assert rc == 0, text[-4000:]
    assert (run / f"weights/step_{STEPS}/STABLE").is_file()
    assert sorted({r["step"] for r in read_metrics(run, "orchestrator")}) == list(range(1, STEPS + 1))

    # both replicas served samples and loaded policy version 1; replica 0 loaded every version
    logs = {0: (run / "logs/vllm.log").read_text(), 1: (run / "logs/vllm-1.log").read_text()}
    for i in (0, 1):
        assert logs[i].count("POST /inference/v1/generate HTTP/1.1\" 200") > 0, i
    updates = {i: len(re.findall(r'"POST /update_weights HTTP/1.1" 200', logs[i])) for i in (0, 1)}
    # versions 1..STEPS-1 are loaded for sampling (the last one only when something samples it, e.g. an eval)
    assert updates[0] >= STEPS - 1 and updates[1] >= 1, updates
    orch = (run / "logs/orchestrator.log").read_text()
    for k in range(1, STEPS):
        assert f"loaded policy version {k} from" in orch
    assert f"inference replica http://127.0.0.1:{port + 1} is down" in orch
    assert "inference-1 died" in (run / "logs/rl.log").read_text()
    # nothing failed is trained: every rollout with an error is masked (a retried request leaves no error)
    for step in range(1, STEPS + 1):
        for line in (run / f"rollouts/step_{step}/traces.jsonl").read_text().splitlines():
            row = json.loads(line)
            assert not row["error"] or row["masked"], row
    left = [q for q in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(q.info["cmdline"] or [])]
    assert left == []
