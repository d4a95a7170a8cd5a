"""Real vLLM servers shared between test modules: one per (model folder, vLLM flags) for the whole session.

A vLLM start is 30-60 s on 2 cores (three Python processes importing vLLM one after the other), so test modules
that only *use* a server on the same model with the same flags share one instead of each starting their own
(tests/conftest.py: the `shared_vllm` fixture; it stops every server after the last test that asked for one).

What makes sharing safe: every `get()` hands the server back serving the model folder's own weights as policy
version 0. A server that was never reloaded (`GET /policy_version` -> path null) is left exactly as started; one
that a previous test reloaded (new weights, another version) gets the base folder reloaded as version 0 first
(`/update_weights` reloads every weight and resets the prefix cache: tests/inference/test_tied_reload.py and the
reload checks show that equals a fresh load). So a test may load other weights into it, but must not kill it or
change anything else about it (flags, LoRA adapters); tests that do must start their own (`start_server`).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from prime_rl.inference.server import VllmServer


def restore_base(base_url: str, model_dir: Path) -> None:
    """Make the server at `base_url` serve `model_dir`'s weights as version 0 (no-op when it already does)."""
    state = httpx.get(f"{base_url}/policy_version", timeout=30).json()
    if state["version"] == 0 and state["path"] in (None, str(model_dir)):
        return
    r = httpx.post(f"{base_url}/update_weights", json={"path": str(model_dir), "version": 0}, timeout=300)
    assert r.status_code == 200, f"restoring {model_dir} as version 0 failed: {r.text}"


class SharedServers:
    """Started servers by (resolved model folder, vLLM flags); `close()` stops them all."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started = 0  # how many servers this session started (reported by tests/conftest.py)
        self._servers: dict[tuple[str, str], tuple[VllmServer, Path]] = {}
        self._stack = ExitStack()

    def get(self, model_dir: str | Path, **vllm: Any) -> VllmServer:
        """The shared server for `model_dir` with `vllm` overrides (as `start_server` takes them), started on first
        use, serving the folder's weights as policy version 0."""
        from prime_rl.inference.testing import start_server

        model = Path(model_dir).resolve()
        key = (str(model), json.dumps(vllm, sort_keys=True, default=str))
        if key not in self._servers:
            log = self.log_dir / f"vllm-{len(self._servers)}.log"
            srv = self._stack.enter_context(start_server(model_dir, log_path=log, **vllm))
            self._servers[key] = (srv, Path(model_dir))
            self.started += 1
        srv, served = self._servers[key]
        restore_base(srv.base_url, served)
        return srv

    def close(self) -> None:
        self._servers.clear()
        self._stack.close()
