"""Shared fixtures: paths to the real ERCOT files, the repository root, and vLLM servers shared between modules and
started ahead of time (tests/shared_vllm.py)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# `dtype = "auto"` is float32 on CPU in every test process and every process a test starts, whatever this CPU's bf16
# speed (prime_rl.cpu_bf16): recorded numbers stay independent of the host. Tests of bf16 set the dtype explicitly.
os.environ["PRIME_RL_CPU_BF16"] = "0"


def ercot_dir() -> Path | None:
    """The real ERCOT NP4-180-ER files: the folder named in $PRIME_RL_ERCOT_DIR (else a fallback
    folder beside the repository); None when neither holds them."""
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
_PRESTART: list = []  # [trigger test's index, module] for collected modules that define `prestart_vllm`
_INDEX: dict = {}  # id(test) -> its index in the session's order


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


@pytest.fixture(autouse=True)
def _own_secrets(monkeypatch):
    """Each test starts without PRIME_RL_SECRETS (config.secrets.SECRETS_ENV) and leaves none: writing a resolved
    config puts its secrets in this process's environment."""
    monkeypatch.delenv("PRIME_RL_SECRETS", raising=False)


@pytest.fixture(autouse=True)
def _prestart_vllm(request, tmp_path_factory):
    """Before each test, the collected modules whose prestart trigger has come (the session's first test, or the
    first test under the module's `PRESTART_WITH` prefix) spawn their servers (`prestart_vllm`) without waiting for
    them: the 30-60 s start-ups then run beside the tests in between and beside each other, and the module only
    waits for what is left (tests/shared_vllm.py)."""
    here = _INDEX.get(id(request.node), len(_INDEX))
    due = [p for p in _PRESTART if p[0] <= here]  # (a trigger test that was skipped fires with the next one)
    for p in due:
        _PRESTART.remove(p)
        try:
            p[1].prestart_vllm(request.getfixturevalue("shared_vllm"), tmp_path_factory)
        except Exception as e:  # the module's own fixtures redo it (and fail there, naming the error)
            warnings.warn(f"prestart_vllm of {p[1].__name__} failed: {type(e).__name__}: {e}", stacklevel=1)
    yield


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
    Also remembers the last test that uses `shared_vllm` and the modules whose servers to prestart (after
    deselection: trylast)."""
    users = [i for i in items if "shared_vllm" in getattr(i, "fixturenames", ())]
    _LAST_SHARED_USER[:] = users[-1:]
    _PRESTART.clear()
    _INDEX.clear()
    _INDEX.update({id(item): n for n, item in enumerate(items)})
    seen = set()
    for n, item in enumerate(items):
        module = getattr(item, "module", None)
        if not hasattr(module, "prestart_vllm") or id(module) in seen:
            continue
        seen.add(id(module))
        prefix = getattr(module, "PRESTART_WITH", None)
        first = next((k for k, i in enumerate(items[:n]) if i.nodeid.startswith(prefix)), n) if prefix else 0
        _PRESTART.append([first, module])
    if os.environ.get("PRIME_RL_LEARNING") == "1":
        return
    skip = pytest.mark.skip(reason="learning run: `make test-learning` (PRIME_RL_LEARNING=1)")
    for item in items:
        if item.get_closest_marker("learning") is not None:
            item.add_marker(skip)
