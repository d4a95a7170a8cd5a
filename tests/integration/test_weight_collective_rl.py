"""`rl` end to end with `weight_transport.type = "collective"` on the random tiny model (digit bandit,
examples/ladder/digit.toml): every policy version reaches the inference server over the weight group (gloo; no
model file is written to weights/step_N/) and the run trains exactly what the filesystem transport's run trains,
loss for loss, step for step (both synchronous, `max_async_level = 0`, seeded: such a run is reproducible bit for
bit, so any difference in the weights the server samples with would show in the losses)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_collective_run_matches_the_filesystem_run_loss_per_step(tmp_path):
    from tests.learning.ladder import LADDER, rl_run

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.metrics import read_metrics
    from prime_rl.ports import free_port

    model = cached_tiny_model(hidden=64, layers=2, seed=0)
    base = ["--max-steps", "3", "--orchestrator.eval.interval", "100", "--orchestrator.max-async-level", "0"]
    runs = {}
    for kind in ("filesystem", "collective"):
        extra = base + ["--weight-transport.type", kind, "--weight-transport.port", str(free_port())]
        runs[kind] = tmp_path / kind
        rl_run(LADDER / "digit.toml", model, runs[kind], seed=0, extra=extra, timeout_s=900)
    losses = {k: {r["step"]: r["loss"] for r in read_metrics(run, "trainer")} for k, run in runs.items()}
    assert sorted(losses["collective"]) == [1, 2, 3]
    assert losses["collective"] == losses["filesystem"]
    assert len({round(v, 9) for v in losses["collective"].values()}) == 3  # three different steps, not one repeated
    step_3 = runs["collective"] / "weights/step_3"
    assert sorted(p.name for p in step_3.iterdir()) == ["STABLE", "transport.json"]  # no model file
    assert json.loads((step_3 / "transport.json").read_text())["version"] == 3
    assert "model.safetensors" in {p.name for p in (runs["filesystem"] / "weights/step_3").iterdir()}
    assert "policy version 3:" in (runs["collective"] / "logs/trainer.log").read_text()
