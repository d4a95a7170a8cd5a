"""A full disk through the real stack: `rl` on the tiny model (vLLM, torchrun trainer, orchestrator) with its run
directory on a 12 MiB tmpfs, checkpoints every step, so the run fills it within a few steps. `rl` names the full
disk as the failure reason ("trainer stopped: no space left on device under RUN/..."), exits 28, and leaves no
temporary checkpoint folder that `--resume` could pick up. Before: `rl` printed torchrun's ChildFailedError text or
the orchestrator's log cut mid-line, exited 1, and `checkpoints/step_N/.trainer.tmp/` stayed with an empty
`.distcp`.

Slow: one `rl` run, about 1.5-2 minutes on 2 cores (most of it vLLM start-up). Skipped where a tmpfs cannot be
mounted (not root).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.test_diskfull import small_fs

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_rl_on_a_full_disk_says_no_space_left_under_the_run(tmp_path):
    model = cached_tiny_model()
    with small_fs(tmp_path / "fs", "12m") as fs:
        run = fs / "run"
        cfg = tmp_path / "rl.toml"
        cfg.write_text(f"""
max_steps = 20
seq_len = 256
output_dir = "{run}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{model}"
[ckpt]
interval = 1
keep_last = 50
[trainer]
threads = 1
[trainer.weights]
keep_last = 50
[orchestrator]
batch_size = 8
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 8
[[orchestrator.train.source]]
name = "fast"
env.id = "tests.integration.fast_env:FastEnv"
[inference.server]
port = {free_port()}
""")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               "OMP_NUM_THREADS": "1"}  # fmt: skip
        r = subprocess.run([str(BIN / "rl"), "@", str(cfg)], capture_output=True, text=True, timeout=900, env=env,
                           cwd=REPO)  # fmt: skip
        out = r.stdout + r.stderr
        logs = "".join(f"\n== {p.name}\n" + p.read_text(errors="replace")[-3000:] for p in (run / "logs").glob("*.log"))
        leftovers = sorted(str(p.relative_to(run)) for p in run.rglob(".*.tmp*"))
        partial = sorted(p.parent.name for p in (run / "checkpoints").glob("step_*/trainer")
                         if not (p / "STABLE").is_file())  # fmt: skip
    assert r.returncode == 28, out[-4000:] + logs
    m = re.search(r"(\w[\w-]*) stopped: no space left on device under (\S+) \([^()]* free of [^()]*\)", out)
    assert m is not None, out[-4000:]
    assert m.group(2).startswith(str(run)), m.group(0)
    assert "ChildFailedError" not in out.split(m.group(0))[-1][:400]  # the reason, not torchrun's text, follows
    assert leftovers == [], leftovers  # no `.trainer.tmp/` (nor a half-written file) for a resume to find
    assert partial == [], partial
