"""Fixtures for the trainer tests: a tiny cached model (hidden 32 x 2 layers, vocab 265)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model(hidden=32, layers=2, seed=0)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
