"""Fixtures of the monitor tests: the tiny cached model the trainer tests use (hidden 32 x 2 layers)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model(hidden=32, layers=2, seed=0)
