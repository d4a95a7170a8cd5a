"""Shared fixtures: paths to the real ERCOT files, the repository root, and vLLM servers shared between modules
(tests/shared_vllm.py)."""

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


_SHARED: list = []  # the session's SharedServers, once a test asked for one
_LAST_SHARED_USER: list = []  # the last collected test that asks for `shared_vllm`


@pytest.fixture(scope="session")
def shared_vllm(tmp_path_factory):
    """Real vLLM servers shared by every module that asks, one per (model folder, flags): `shared_vllm.get(model,
    **vllm_flags)` returns a `VllmServer` serving the folder's weights as policy version 0 (reloaded first when a
    previous test loaded others). Safe for tests that sample from it or load weights into it; a test that kills it
    or changes its flags starts its own. Stopped after the last test that uses it (see tests/shared_vllm.py)."""
    from tests.shared_vllm import SharedServers

    servers = SharedServers(tmp_path_factory.mktemp("vllm-shared"))
    _SHARED.append(servers)
    yield servers
    servers.close()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """Stop the shared vLLM servers once the last test using them is done (they hold GiBs of RAM and a 2-core
    machine runs other vLLMs later in the session)."""
    if _SHARED and _LAST_SHARED_USER and item is _LAST_SHARED_USER[0]:
        for s in _SHARED:
            s.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`learning` tests (multi-minute learning runs) run only under `make test-learning` (PRIME_RL_LEARNING=1).
    Also remembers the last test that uses `shared_vllm` (after deselection: trylast)."""
    users = [i for i in items if "shared_vllm" in getattr(i, "fixturenames", ())]
    _LAST_SHARED_USER[:] = users[-1:]
    if os.environ.get("PRIME_RL_LEARNING") == "1":
        return
    skip = pytest.mark.skip(reason="learning run: `make test-learning` (PRIME_RL_LEARNING=1)")
    for item in items:
        if item.get_closest_marker("learning") is not None:
            item.add_marker(skip)
