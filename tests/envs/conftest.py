"""Fixtures of the environment tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ercot_dir_shared() -> Path:
    """The real ERCOT files (as tests/conftest.py's `ercot_data_dir`, but shareable by module fixtures)."""
    env = os.environ.get("PRIME_RL_ERCOT_DIR")
    for c in ([Path(env)] if env else []) + [_REPO.parent / "shared" / "data" / "ercot"]:
        if c.is_dir() and any(c.glob("DAMLZHBSPP_*.xlsx")):
            return c
    pytest.skip("real ERCOT files not found (set PRIME_RL_ERCOT_DIR)")
