"""The reference system's GridSim config (examples/gridsim/seed.toml) runs on CPU as it is: 1 train + 3 inference
"GPUs", LoRA rank 32, nemo-gym rows at its relative dataset path, resources server at 127.0.0.1:9100.

Only the model path, ports, the run directory and the run's length are overridden (the full config is 40 steps of
32 rollouts x up to 4 x 1024 tokens: hours on 2 cores), and the advantages: the random tiny model scores 0 on every
day, and a run that trains nothing ends with exit 1, so a test estimator gives every step a nonzero advantage
(`tests.orchestrator.rl_stubs:alternating_advantages`) and both steps are real updates.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port, port_free

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
SEED = Path(__file__).resolve().parents[2] / "examples" / "gridsim" / "seed.toml"


def test_seed_config_runs_on_cpu(tmp_path):
    if not port_free("127.0.0.1", 9100):
        pytest.skip("port 9100 (the seed config's resources_url) is taken on this machine")
    model = cached_tiny_model(hidden=64, layers=2)  # = `prime-rl tiny-model OUT --hidden 64 --layers 2`, cached
    # rows at the seed config's relative dataset path, as `env-server write` produces them
    subprocess.run([str(BIN / "env-server"), "write", "gridsim", str(tmp_path / "gym-root")], check=True,
                   capture_output=True, timeout=300)
    run = tmp_path / "run"
    r = subprocess.run(
        [str(BIN / "rl"), "@", str(SEED), "--model.name", str(model), "--output-dir", str(run),
         "--max-steps", "2", "--orchestrator.batch-size", "8", "--orchestrator.concurrency.max-inflight", "8",
         "--orchestrator.train.sampling.max-completion-tokens", "64", "--orchestrator.eval.num-examples", "4",
         "--orchestrator.eval.sampling.max-completion-tokens", "64", "--inference.server.port", str(free_port()),
         "--orchestrator.advantage.type", "custom",
         "--orchestrator.advantage.import-path", "tests.orchestrator.rl_stubs:alternating_advantages"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert sorted({int(m) for m in re.findall(r"^Step (\d+)/\d+ \|", out, flags=re.M)}) == [1, 2]
    trainer_rows = read_metrics(run, "trainer")
    assert [row["step"] for row in trainer_rows] == [1, 2]
    assert (run / "weights/step_2/STABLE").is_file()
    rl_cfg = (run / "configs/trainer.toml").read_text()
    assert "rank = 32" in rl_cfg and "lr = 2e-05" in rl_cfg
