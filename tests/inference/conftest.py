"""Fixtures for the inference and model tests: a cached tiny model directory."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """hidden 128 x 2 layers, seed 0; built once per machine (cached), read-only."""
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model(hidden=128, layers=2, seed=0)
