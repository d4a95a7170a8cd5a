"""A real 3-node Slurm cluster on this machine for the session (`scripts/local-slurm.sh up`, down at the end if
this session brought it up), and helpers to submit, wait for and inspect jobs.

Under CI (`CI=true`) the cluster is installed and started, and a failure to do so fails the tests: they never
skip there. Elsewhere they skip, saying why, when Slurm is not installed or the user is not root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.integration.stack import leftovers

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local-slurm.sh"
BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI", "").lower() == "true"


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true: the Slurm tests must run, but {reason}")
    pytest.skip(reason)


def _slurm_env() -> dict[str, str]:
    out = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True)
    key, _, value = out.stdout.strip().removeprefix("export ").partition("=")
    return {key: value}


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    """The environment (SLURM_CONF) of a running 3-node cluster: node1..node3, partition debug."""
    if os.geteuid() != 0:
        _unavailable("the local Slurm cluster needs root (slurmd runs as root)")
    if shutil.which("slurmctld") is None and not IN_CI:
        _unavailable("Slurm is not installed (bash scripts/local-slurm.sh install)")
    env = _slurm_env()
    pid_file = Path(env["SLURM_CONF"]).parent / "run" / "slurmctld.pid"
    was_up = pid_file.is_file() and psutil.pid_exists(int(pid_file.read_text().strip() or 0))
    r = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "SLURM_LOCAL_NODES": "3"})
    if r.returncode != 0:
        pytest.fail(f"scripts/local-slurm.sh up failed:\n{r.stdout}\n{r.stderr}")
    yield env
    if not was_up:
        subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=120)


def job_env(slurm_env: dict[str, str]) -> dict[str, str]:
    """Environment of `rl`/`sft` (and so of the job): the repository importable (tests.integration.fast_env),
    the cluster's SLURM_CONF, one intra-op thread."""
    env = dict(os.environ)
    env.update(slurm_env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


SUBMITTED: list[tuple[str, dict[str, str]]] = []


def submit(cmd: list[str], env: dict[str, str]) -> tuple[str, str]:
    """Run `rl`/`sft` with `[slurm]`; returns (job id, its printout). The job is cancelled at the end of the test
    if it is still queued or running (a failed test leaves nothing on the cluster)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    m = re.search(r"submitted Slurm job (\d+)", out)
    assert m, out
    SUBMITTED.append((m.group(1), env))
    return m.group(1), out


@pytest.fixture(autouse=True)
def cancel_leftover_jobs():
    yield
    while SUBMITTED:
        job, env = SUBMITTED.pop()
        if squeue_state(job, env):
            subprocess.run(["scancel", job], env=env, timeout=30)
            deadline = time.monotonic() + 120
            while squeue_state(job, env) and time.monotonic() < deadline:
                time.sleep(1)


def job_state(job_id: str, env: dict[str, str]) -> tuple[str, str] | None:
    """(State, ExitCode) from `sacct` once the job has left the queue, else None. The local cluster keeps job
    records in a text file (`sacct -c`); the newest record of the id counts (ids restart with a fresh state dir)."""
    if squeue_state(job_id, env):
        return None
    r = subprocess.run(["sacct", "-c", "-j", job_id, "-n", "-P", "-o", "JobID,State,ExitCode"], capture_output=True,
                       text=True, timeout=30, env=env)
    found = None
    for line in r.stdout.splitlines():
        jid, state, code = line.split("|")
        if jid == job_id:
            found = state, code
    return found


def squeue_state(job_id: str, env: dict[str, str]) -> str:
    r = subprocess.run(["squeue", "-h", "-j", job_id, "-t", "PENDING,CONFIGURING,RUNNING,COMPLETING,SUSPENDED", "-o", "%T"], capture_output=True, text=True, timeout=30, env=env)
    return r.stdout.strip()


def wait_job(job_id: str, env: dict[str, str], job_log: Path, timeout_s: float = 1200) -> tuple[str, str]:
    """Block until the job ended; returns (State, ExitCode). AssertionError with the job log after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = job_state(job_id, env)
        if st is not None:
            return st
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], env=env, timeout=30)
    raise AssertionError(f"job {job_id} still {squeue_state(job_id, env)!r} after {timeout_s:.0f} s:\n{tail(job_log)}")


def tail(path: Path, n: int = 6000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else f"({path} missing)"


def wait_no_leftovers(marker: str, timeout_s: float = 30) -> list[str]:
    """Leftover processes after up to `timeout_s` (Slurm reaps a step's processes a moment after the job ends)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = leftovers(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
