"""Fixtures of the tests against the real peer packages (nemo-gym 0.7.0, verifiers 0.4.0).

Each peer lives in its own venv built once per machine by `scripts/peer_venvs.py` (cached under
`~/.cache/prime-rl/peer-venvs`; the first build takes a few minutes, later runs reuse it). When a venv cannot be
built, the tests skip with the reason; under CI (`CI=true`) they fail with it instead, so CI never passes by
skipping them. Peer-side code runs as scripts in `tests/interop/peer/`, started with the peer's python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PEER = Path(__file__).resolve().parent / "peer"


def _peer_python(name: str) -> Path:
    try:
        r = subprocess.run([sys.executable, str(REPO / "scripts" / "peer_venvs.py"), "build", name],
                           capture_output=True, text=True, timeout=2400)  # fmt: skip
        reason = r.stderr.strip() or f"exit status {r.returncode}"
        ok = r.returncode == 0
    except subprocess.TimeoutExpired:
        ok, reason = False, "scripts/peer_venvs.py timed out after 40 min"
    if not ok:
        msg = f"the {name} peer venv could not be built: {reason}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return Path(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def nemo_python() -> Path:
    """Python of the nemo-gym 0.7.0 venv."""
    return _peer_python("nemo-gym")


@pytest.fixture(scope="session")
def verifiers_python() -> Path:
    """Python of the verifiers 0.4.0 venv."""
    return _peer_python("verifiers")


def peer_env() -> dict[str, str]:
    """Environment of a peer script: prime-rl's sources importable (no install needed), no project venv leaking."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), str(PEER)])
    return env


def run_peer(python: Path, script: str, *args: str, timeout: float = 600) -> dict:
    """Run `tests/interop/peer/<script>` with the peer's python; returns the JSON of its last stdout line."""
    r = subprocess.run([str(python), str(PEER / script), *args], capture_output=True, text=True, timeout=timeout,
                       env=peer_env(), cwd=REPO)  # fmt: skip
    assert r.returncode == 0, f"{script} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@contextmanager
def peer_server(python: Path, *args: str, timeout: float = 300) -> Iterator[dict]:
    """Start `nemo_serve.py ARGS` with the peer's python; yields the ports it prints; always stops it."""
    proc = subprocess.Popen([str(python), str(PEER / "nemo_serve.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=peer_env(), cwd=REPO)  # fmt: skip
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    try:
        if not line or not line[0].strip():
            proc.kill()
            raise RuntimeError(f"nemo_serve.py {' '.join(args)} did not start:\n{proc.stderr.read()[-3000:]}")
        yield json.loads(line[0])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
