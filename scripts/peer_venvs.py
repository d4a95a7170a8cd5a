#!/usr/bin/env python3
"""Build (once per machine) the virtual environments of the peer packages prime-rl is tested against.

    python scripts/peer_venvs.py build nemo-gym      # prints the venv's python; builds it first if needed
    python scripts/peer_venvs.py build verifiers
    python scripts/peer_venvs.py path nemo-gym       # prints where it lives (built or not)

Each peer lives in its own venv under `$PRIME_RL_PEER_VENVS` (default `~/.cache/prime-rl/peer-venvs`), named
`<name>-<version>`, never in the project's venv (their pins differ from ours: verifiers 0.4 wants openai < 3 and
mcp == 2.0.0, vLLM 0.32 brought openai 3 and mcp 2.3). A finished venv holds `.complete` with a hash of its recipe
(version + pinned requirements file + this script's recipe); a venv whose hash differs is rebuilt. Builds run under a
file lock, so concurrent test runs on one machine build it once; `.complete` is written last.

- nemo-gym 0.7.0 declares Python >= 3.13.14, so pip on 3.11 offers no version of it. Its pure-Python wheel is
  downloaded for Python 3.13.14 without dependencies, installed with `--ignore-requires-python --no-deps`, and the
  modules it imports are installed from `scripts/peer-venvs/nemo-gym-0.7.0.txt` (exact versions that were checked
  to import its base resources server, the example servers and SimpleAgent on Python 3.11). The wheel also carries
  NeMo Gym's example servers and agents (`resources_servers/`, `responses_api_agents/`) as top-level packages.
- verifiers 0.4.0 installs normally on 3.11, pinned by `scripts/peer-venvs/verifiers-0.4.0.txt`.

Uses only the standard library and the network path to PyPI (pip). Exit status 1 with the reason on failure.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PINS = HERE / "peer-venvs"


@dataclass(frozen=True)
class Peer:
    """How to build one peer venv. `wheel_python`: download the wheel for this Python and install it without its
    declared dependencies (they come from the pins file); None: `pip install name==version` with the pins."""

    name: str
    version: str
    probe: tuple[str, ...]
    wheel_python: str | None = None
    python: str = "python3.11"
    extra_pip_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def pins(self) -> Path:
        return PINS / f"{self.name}-{self.version}.txt"

    def recipe_hash(self) -> str:
        h = hashlib.sha256(repr(self).encode())
        h.update(self.pins.read_bytes())
        return h.hexdigest()[:16]


PEERS = {
    "nemo-gym": Peer(
        "nemo-gym", "0.7.0", wheel_python="3.13.14",
        probe=("nemo_gym.base_resources_server", "resources_servers.example_single_tool_call.app",
               "resources_servers.example_session_state_mgmt.app", "responses_api_agents.simple_agent.app"),
    ),  # fmt: skip
    "verifiers": Peer("verifiers", "0.4.0", probe=("verifiers.v1", "verifiers.v1.tasksets.nemo_gym")),
}


def root() -> Path:
    return Path(os.environ.get("PRIME_RL_PEER_VENVS", Path.home() / ".cache" / "prime-rl" / "peer-venvs"))


def venv_dir(peer: Peer) -> Path:
    return root() / f"{peer.name}-{peer.version}"


def is_built(peer: Peer) -> bool:
    marker = venv_dir(peer) / ".complete"
    return marker.is_file() and marker.read_text().strip() == peer.recipe_hash()


def _run(cmd: list[str], log) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed with exit status {r.returncode}")


def _build_into(peer: Peer, d: Path, log) -> None:
    python = shutil.which(peer.python)
    if python is None:
        raise RuntimeError(f"{peer.python} not found on PATH (the peer venvs are built with it)")
    _run([python, "-m", "venv", str(d)], log)
    pip = [str(d / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "-q", "--upgrade", "pip"], log)
    if peer.wheel_python is not None:
        wheels = d / "_wheels"
        _run([*pip, "download", "-q", f"{peer.name}=={peer.version}", "--no-deps", "--only-binary=:all:",
              "--python-version", peer.wheel_python, "-d", str(wheels)], log)  # fmt: skip
        (wheel,) = wheels.glob("*.whl")
        _run([*pip, "install", "-q", "--no-deps", "--ignore-requires-python", str(wheel)], log)
        shutil.rmtree(wheels)
        _run([*pip, "install", "-q", "-r", str(peer.pins), *peer.extra_pip_args], log)
    else:
        _run([*pip, "install", "-q", f"{peer.name}=={peer.version}", "-c", str(peer.pins), *peer.extra_pip_args], log)
    probe = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
    _run([str(d / "bin" / "python"), "-c", probe, *peer.probe], log)


def build(peer: Peer) -> Path:
    """The peer's venv, built first if missing or stale. Returns the venv directory.

    Raises:
        RuntimeError: a build step failed (the message names it and the log file).
    """
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f"{peer.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(peer):
            return venv_dir(peer)
        log_path = base / f"{peer.name}-{peer.version}.build.log"
        final = venv_dir(peer)
        if final.exists():  # stale or half-built (no matching `.complete`): start over
            shutil.rmtree(final)
        with open(log_path, "w") as log:
            try:
                _build_into(peer, final, log)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError, OSError) as e:
                raise RuntimeError(f"building the {peer.name} {peer.version} venv failed: {e} (log: {log_path})") from e
        (final / ".complete").write_text(peer.recipe_hash() + "\n")
        return venv_dir(peer)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="peer_venvs", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["build", "path"])
    p.add_argument("peer", choices=sorted(PEERS))
    args = p.parse_args(argv)
    peer = PEERS[args.peer]
    if args.command == "path":
        print(venv_dir(peer) / "bin" / "python")
        return 0
    try:
        d = build(peer)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(d / "bin" / "python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
