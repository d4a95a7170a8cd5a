"""Shared fixtures: paths to the real ERCOT files and the repository root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ercot_dir() -> Path | None:
    """The real ERCOT NP4-180-ER files: $PRIME_RL_ERCOT_DIR or ../shared/data/ercot beside the repository."""
    env = os.environ.get("PRIME_RL_ERCOT_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data" / "ercot")
    for c in candidates:
        if c.is_dir() and any(c.glob("DAMLZHBSPP_*.xlsx")):
            return c
    return None


@pytest.fixture
def ercot_data_dir() -> Path:
    d = ercot_dir()
    if d is None:
        pytest.skip("real ERCOT files not found (set PRIME_RL_ERCOT_DIR)")
    return d


def pytest_collection_modifyitems(config, items):
    """`learning` tests (multi-minute learning runs) run only under `make test-learning` (PRIME_RL_LEARNING=1)."""
    if os.environ.get("PRIME_RL_LEARNING") == "1":
        return
    skip = pytest.mark.skip(reason="learning run: `make test-learning` (PRIME_RL_LEARNING=1)")
    for item in items:
        if item.get_closest_marker("learning") is not None:
            item.add_marker(skip)
