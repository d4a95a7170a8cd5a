"""`rl` end to end with `rollout_transport.type = "tcp"` on the random tiny model (digit bandit,
examples/ladder/digit.toml): the trainer's batches come over ZMQ from the orchestrator (no rank_R.bin is
written) and the run trains exactly what the filesystem transport's run trains, loss for loss, step for step
(both synchronous, `max_async_level = 0`, seeded: such a run is reproducible bit for bit)."""

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
