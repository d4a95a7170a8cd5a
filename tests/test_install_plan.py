"""scripts/install.sh's torch resolution under a stock pip: which pin and which extra index it would use.

pip is replaced by a stub that answers the script's `--dry-run` probe (found or not found), so no network is used."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _plan(tmp_path: Path, extra: str, pip_finds_wheel: bool) -> str:
    stub = tmp_path / "pip"
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\nexit {0 if pip_finds_wheel else 1}\n")
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PRIME_RL_INSTALL_PLAN="1", PIP_CMD=str(stub), EXTRA=extra, TORCH_VERSION="2.13.0")
    out = subprocess.run(["bash", str(REPO / "scripts/install.sh")], env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.strip()


x86_linux = pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                               reason="the +cpu pin applies to x86_64 Linux only")


@x86_linux
def test_cpu_stock_pip_uses_pytorch_cpu_index(tmp_path):
    plan = _plan(tmp_path, "cpu", pip_finds_wheel=False)
    assert plan == f"torch: pip install --extra-index-url {CPU_INDEX} torch==2.13.0+cpu"
    assert "--dry-run --no-deps torch==2.13.0+cpu" in (tmp_path / "calls").read_text()


@x86_linux
def test_cpu_wheel_found_locally_needs_no_extra_index(tmp_path):
    assert _plan(tmp_path, "cpu", pip_finds_wheel=True) == "torch: pip install torch==2.13.0+cpu"


def test_gpu_flavour_stays_on_pypi_and_probes_nothing(tmp_path):
    assert _plan(tmp_path, "gpu", pip_finds_wheel=False) == "torch: pip install torch==2.13.0"
    assert not (tmp_path / "calls").exists()
