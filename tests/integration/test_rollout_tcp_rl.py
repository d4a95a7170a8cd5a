"""`rl` end to end with `rollout_transport.type = "tcp"` on the random tiny model (digit bandit,
examples/ladder/digit.toml): the trainer's batches come over ZMQ from the orchestrator (no rank_R.bin is
written) and the run trains exactly what the filesystem transport's run trains, loss for loss, step for step
(both synchronous, `max_async_level = 0`, seeded: such a run is reproducible bit for bit); a tcp run killed
mid-run resumes with `rl --resume` and trains each remaining step once."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_tcp_run_matches_the_filesystem_run_loss_per_step(tmp_path):
    from tests.learning.ladder import LADDER, rl_run

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.metrics import read_metrics
    from prime_rl.ports import free_port

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    base = ["--max-steps", "3", "--orchestrator.eval.interval", "100", "--orchestrator.max-async-level", "0"]
    runs = {}
    for kind in ("filesystem", "tcp"):
        extra = base + ["--rollout-transport.type", kind, "--rollout-transport.port", str(free_port())]
        runs[kind] = tmp_path / kind
        rl_run(LADDER / "digit.toml", model, runs[kind], seed=0, extra=extra, timeout_s=900)
    losses = {k: {r["step"]: r["loss"] for r in read_metrics(run, "trainer")} for k, run in runs.items()}
    assert sorted(losses["tcp"]) == [1, 2, 3]
    assert losses["tcp"] == losses["filesystem"]
    assert len({round(v, 9) for v in losses["tcp"].values()}) == 3  # three different steps, not one repeated
    assert sorted(p.name for p in (runs["filesystem"] / "rollouts/step_1").iterdir()) == ["rank_0.bin", "traces.jsonl"]
    assert not list((runs["tcp"] / "rollouts").rglob("*.bin"))  # nothing went through the filesystem
    assert "rollouts over tcp: listening on tcp://127.0.0.1:" in (runs["tcp"] / "logs/orchestrator.log").read_text()


def test_tcp_run_killed_mid_run_resumes_and_trains_every_step_once(tmp_path):
    """The trainer is SIGKILLed after its step-2 checkpoint (rl stops the run, exit 1); `rl --resume` restarts
    trainer and orchestrator from the newest complete checkpoint K: the trainer asks for step K + 1 over tcp and
    trains K + 1 .. 4, each once (its log lists each step one time), and the run ends cleanly with the last policy
    versions published; no rank_R.bin was written in either invocation."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import psutil
    from tests.learning.ladder import LADDER, seed_args

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.metrics import read_metrics
    from prime_rl.ports import free_port

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    run = tmp_path / "run"
    port = free_port()
    argv = [str(Path(sys.executable).parent / "rl"), "@", str(LADDER / "digit.toml"), "--model.name", str(model),
            "--output-dir", str(run), "--inference.server.port", str(port),
            "--orchestrator.client.base-url", f'["http://127.0.0.1:{port}"]', *seed_args(0), "--max-steps", "4",
            "--orchestrator.eval.interval", "100", "--ckpt.interval", "1", "--rollout-transport.type", "tcp",
            "--rollout-transport.port", str(free_port())]  # fmt: skip
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.time()
        while not (run / "checkpoints/step_2/trainer/STABLE").is_file():
            assert p.poll() is None, p.stdout.read()[-4000:]
            assert time.time() - t0 < 600, "no step-2 checkpoint in time"
            time.sleep(0.5)
        workers = [q for q in psutil.process_iter(["cmdline"])
                   if "prime_rl.cli.trainer" in " ".join(q.info["cmdline"] or [])
                   and str(run) in " ".join(q.info["cmdline"] or [])
                   and "torch.distributed.run" not in " ".join(q.info["cmdline"] or [])]  # fmt: skip
        assert workers, "trainer rank process not found"
        for w in workers:
            os.kill(w.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, out[-4000:]
    r = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=900)
    out2 = r.stdout + r.stderr
    assert r.returncode == 0, out2[-4000:]
    resumed = int(re.search(r"resuming from checkpoint step (\d+)", out2).group(1))
    assert resumed >= 2
    log = (run / "logs/trainer.log").read_text().split(f"starting at step {resumed + 1}")
    assert len(log) == 2, "the resumed trainer's start line"
    assert sorted(int(s) for s in re.findall(r"^.*\bStep (\d+)/4\b", log[1], flags=re.M)) == list(range(resumed + 1, 5))
    assert {row["step"] for row in read_metrics(run, "trainer")} >= set(range(resumed + 1, 5))
    assert all((run / f"weights/step_{n}/STABLE").is_file() for n in (3, 4))
    assert not list((run / "rollouts").rglob("*.bin"))
