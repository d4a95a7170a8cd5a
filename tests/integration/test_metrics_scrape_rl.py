"""The Prometheus endpoints of a real `rl` run (tiny model, vLLM, torchrun trainer, orchestrator, the fast in-process
environment), scraped over HTTP while the run goes and parsed with prometheus_client's text parser: the
orchestrator's and the trainer's step, policy version, rollouts and tokens equal what the run wrote to
metrics.jsonl for the same steps, and `rl`'s own console named both endpoints. The run is set to more steps than
the test waits for, so both endpoints are up while it scrapes; it is then stopped with SIGTERM.

Slow: one `rl` run, about 2 minutes on 2 cores (most of it vLLM start-up). max_steps is far above what the scrapes need:
a tiny-model step can take ~0.4 s, and at 50 steps the run could end before the trainer endpoint gave two equal
scrapes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BATCH = 10  # rollouts per step


def scrape(port: int) -> dict[tuple[str, tuple], float] | None:
    """GET /metrics parsed with the Prometheus text parser: {(sample name, sorted labels): value}; None while
    nothing answers."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def value(samples: dict, name: str, process: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted({"process": process, **labels}.items()))))


def settled(port: int, process: str, min_step: int, proc: subprocess.Popen, deadline: float) -> dict:
    """The first scrape of `process` at step >= `min_step` that an immediate second scrape repeats (a scrape never
    falls between the updates of one step). Fails when rl exits first or `deadline` passes (a guard, not a
    measurement)."""
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"rl exited ({proc.returncode}) before {process} reached step {min_step}"
        now = scrape(port)
        step = value(now, "prime_rl_step", process) if now else None
        if step is not None and step >= min_step and now == last:
            return now
        last = now if step is not None and step >= min_step else None
        time.sleep(0.2 if last is not None else 2.0)
    raise AssertionError(f"{process} did not reach step {min_step} on port {port}")


def test_scrape_orchestrator_and_trainer_during_an_rl_run(tmp_path):
    run = tmp_path / "run"
    orch_port, trainer_port = free_port(), free_port()
    cfg = tmp_path / "rl.toml"
    cfg.write_text(f"""
max_steps = 400
seq_len = 256
output_dir = "{run}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{cached_tiny_model()}"
[trainer]
threads = 1
[trainer.metrics_server]
port = {trainer_port}
[orchestrator]
batch_size = {BATCH}
[orchestrator.metrics_server]
port = {orch_port}
[orchestrator.concurrency]
max_inflight = 10
[orchestrator.train]
group_size = 5
[orchestrator.train.sampling]
max_completion_tokens = 12
[[orchestrator.train.source]]
name = "fast"
env.id = "tests.integration.fast_env:FastEnv"
[inference.server]
port = {free_port()}
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    out, err = (tmp_path / "rl.out").open("w"), (tmp_path / "rl.err").open("w")
    proc = subprocess.Popen([str(BIN / "rl"), "@", str(cfg)], stdout=out, stderr=err, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 900
        orch = settled(orch_port, "orchestrator", 2, proc, deadline)
        trainer = settled(trainer_port, "trainer", 2, proc, deadline)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # rl stops every child, then exits 143
        code = proc.wait(timeout=300)
        out.close()
        err.close()
    console = (tmp_path / "rl.err").read_text() + (tmp_path / "rl.out").read_text()
    assert code == 143, console[-4000:]
    assert f"trainer metrics: http://127.0.0.1:{trainer_port}/metrics" in console
    assert f"orchestrator metrics: http://127.0.0.1:{orch_port}/metrics" in console

    rows = {r["step"]: r for r in read_metrics(run, "orchestrator")}
    n = int(value(orch, "prime_rl_step", "orchestrator"))
    assert n >= 2 and n in rows
    assert value(orch, "prime_rl_rollouts_total", "orchestrator") == sum(rows[s]["num_rollouts"] for s in range(1, n + 1))
    assert value(orch, "prime_rl_rollouts_total", "orchestrator") == BATCH * n  # the fast env masks nothing
    assert value(orch, "prime_rl_policy_version", "orchestrator") == rows[n]["policy_version"]
    assert value(orch, "prime_rl_off_policy_steps", "orchestrator") == rows[n]["max_off_policy"]
    assert value(orch, "prime_rl_last_step_timestamp_seconds", "orchestrator") > 0

    rows = {r["step"]: r for r in read_metrics(run, "trainer")}
    n = int(value(trainer, "prime_rl_step", "trainer"))
    assert n >= 2 and n in rows
    assert value(trainer, "prime_rl_policy_version", "trainer") == n  # the trainer publishes version n at step n
    tokens = sum(rows[s]["tokens"] for s in range(1, n + 1))
    assert tokens > 0 and value(trainer, "prime_rl_tokens_total", "trainer") == pytest.approx(tokens, rel=1e-9)
