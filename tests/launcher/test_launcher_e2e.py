"""`rl` end to end on the real ERCOT days (the packaged 2021-2024 file, GridSim's default) with the tiny model: env
server (started by rl, rows written by rl), vLLM inference, torchrun trainer and orchestrator, for a few short steps.
The trainer is killed mid-run: rl must exit non-zero naming it, leave nothing running, and `--resume` must finish
the run. One run (two `rl` invocations) serves both: a separate uninterrupted run cost one more vLLM start-up and
checked nothing the two halves do not (a fresh run's clean exit is checked by tests/integration's `rl` runs).

Slow (each rl invocation is about 1.5-2 minutes on 2 cores, most of it vLLM start-up).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    """The 64x2 tiny model, cached per machine (what `prime-rl tiny-model OUT --hidden 64 --layers 2` writes; the
    command itself is tests/inference/test_tiny_model.py's: building it here cost ~10 s of imports)."""
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model(hidden=64, layers=2)


def write_config(tmp: Path, model: Path, max_steps: int) -> Path:
    cfg = tmp / "rl.toml"
    cfg.write_text(f"""
max_steps = {max_steps}
seq_len = 2048
output_dir = "{tmp / 'run'}"
startup_timeout_s = 300
stop_grace_s = 5
[model]
name = "{model}"
[ckpt]
interval = 1
[orchestrator]
batch_size = 8
[orchestrator.advantage]
type = "custom"
import_path = "tests.orchestrator.rl_stubs:alternating_advantages"
[orchestrator.concurrency]
max_inflight = 8
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 48
[[orchestrator.train.source]]
name = "gridsim"
env.taskset.id = "nemo-gym"
env.taskset.dataset = "{tmp / 'gym/resources_servers/gridsim_v1/data/train.jsonl'}"
env.taskset.task.resources_url = "http://127.0.0.1:{free_port()}"
env.agent.max_turns = 2
[orchestrator.eval]
interval = {max_steps}
num_examples = 4
[orchestrator.eval.sampling]
max_completion_tokens = 48
[inference.server]
port = {free_port()}
""")
    return cfg


def leftovers(tmp: Path) -> list[str]:
    """Processes whose command line mentions the test's directory (every child of the run does)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and str(tmp) in " ".join(p.info["cmdline"] or []):
                out.append(f"{p.pid}: {' '.join(p.info['cmdline'])[:150]}")
        except psutil.Error:
            pass
    return out


REPO = Path(__file__).resolve().parents[2]
# the orchestrator imports the test's advantage estimator (tests.orchestrator.rl_stubs) from the repository root
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def rl(cfg: Path, *extra: str, timeout: float = 480) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "rl"), "@", str(cfg), *extra], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=REPO)  # fmt: skip


def steps_printed(text: str) -> list[int]:
    return sorted({int(m) for m in re.findall(r"^Step (\d+)/\d+ \|", text, flags=re.M)})


def test_trainer_killed_then_resume(tmp_path, tiny_model):
    """One run for the two checks that used to start a run each (each `rl` run is mostly vLLM start-up): a fresh
    4-step run on ERCOT (rows written by rl, env server, vLLM, trainer, orchestrator, eval) whose trainer is
    SIGKILLed after its step-2 checkpoint, then `rl --resume` to the end. Together the two halves must show what
    one uninterrupted run shows: every step printed, every policy version published and loaded into vLLM, the
    eval on the base policy and at the last step, nothing left running. The tiny model scores 0 on every GridSim day,
    so the advantages come from a test estimator that gives every step a nonzero one: each step is a real update (a
    run that trains nothing ends with exit 1), and the checkpoint holds real optimizer state to resume."""
    cfg = write_config(tmp_path, tiny_model, max_steps=4)
    run = tmp_path / "run"
    p = subprocess.Popen([str(BIN / "rl"), "@", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=ENV, cwd=REPO)  # fmt: skip
    try:
        t0 = time.time()
        while not (run / "checkpoints/step_2/trainer/STABLE").is_file():
            assert p.poll() is None, p.stdout.read()[-4000:]
            assert time.time() - t0 < 400, "no step-2 checkpoint in time"
            time.sleep(0.5)
        workers = [q for q in psutil.process_iter(["cmdline"])
                   if "prime_rl.cli.trainer" in " ".join(q.info["cmdline"] or []) and str(run) in " ".join(q.info["cmdline"] or [])
                   and "torch.distributed.run" not in " ".join(q.info["cmdline"] or [])]
        assert workers, "trainer rank process not found"
        for w in workers:
            os.kill(w.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, out[-4000:]
    assert re.search(r"trainer died \(exit code \d+\)", out), out[-4000:]
    assert "Last lines of" in out and "trainer.console.log" in out
    assert leftovers(tmp_path) == []
    assert not (run / "weights/step_4/STABLE").exists()
    # what the fresh run did before the kill
    assert "rows missing: writing them" in out and "env-server healthy" in out
    assert steps_printed(out)[:2] == [1, 2], out[-4000:]
    assert len((run / "eval/step_0.jsonl").read_text().splitlines()) == 4  # eval on the base policy
    assert len((tmp_path / "gym/resources_servers/gridsim_v1/data/eval.jsonl").read_text().splitlines()) == 200

    r = rl(cfg, "--resume")
    out2 = r.stdout + r.stderr
    assert r.returncode == 0, out2[-4000:]
    m = re.search(r"resuming from checkpoint step (\d+)", out2)
    assert m and int(m.group(1)) >= 2
    resumed = int(m.group(1))
    assert steps_printed(out2) == list(range(resumed + 1, 5))
    assert "rows missing" not in out2  # the first run's rows are used
    for n in (2, 3, 4):  # every policy version published (weights.keep_last = 3 removed step_1 after step 4)...
        assert (run / f"weights/step_{n}/STABLE").is_file()
    orch_log = (run / "logs/orchestrator.log").read_text()
    for n in (1, 2, 3, 4):  # ...and loaded into inference (4 for the last eval)
        assert f"loaded policy version {n} from" in orch_log
    # the resumed run's vLLM (the last start in the appended log) loaded the checkpoint's version, then each later one
    vllm_log = (run / "logs/vllm.log").read_text().split("===== prime-rl launcher: starting vllm")[-1]
    assert len(re.findall(r'"POST /update_weights HTTP/1.1" 200', vllm_log)) == 4 - resumed + 1
    assert sorted({row["step"] for row in read_metrics(run, "orchestrator")}) == [1, 2, 3, 4]
    assert len((run / "eval/step_4.jsonl").read_text().splitlines()) == 4  # eval at the last step
    assert leftovers(tmp_path) == []
