"""Real vLLM servers for the session: one per (model folder, vLLM flags), shared between test modules and started
ahead of time.

A vLLM start is 30-60 s on 2 cores (three Python processes importing vLLM one after the other), so test modules
that only *use* a server on the same model with the same flags share one instead of each starting their own
(tests/conftest.py: the `shared_vllm` fixture; it stops every server after the last test that asked for one).

Prestart: a vLLM start keeps about one core busy, so on 2 cores the other one is free while it runs. A test module
that knows its servers before its tests run defines `prestart_vllm(shared, tmp_path_factory)` and calls
`shared.prestart(model_dir, **vllm_flags)` in it; tests/conftest.py calls it when the session starts (or, with a
module attribute `PRESTART_WITH = "tests/dir/"`, when the first collected test under that prefix starts), so the
start-ups run beside earlier (light, one-core) tests and beside each other instead of one after another. A
prestarted server is the same server `get()` would start (same folder, flags and config): `get()` only waits for its
`/health` instead of starting it. Run as root, a prestarted server's processes run at the session's nice value + 10
until a test asks for it (then at the session's again), so the tests running meanwhile keep their CPU and the
start-up mostly gets the idle cycles. A module may also prestart a process of its own (e.g. the `inference`
command) and hand its stop to `shared.on_close`, so it never outlives the session.

What makes sharing safe: every `get()` hands the server back serving the model folder's own weights as policy
version 0. A server that was never reloaded (`GET /policy_version` -> path null) is left exactly as started; one
that a previous test reloaded (new weights, another version) gets the base folder reloaded as version 0 first
(`/update_weights` reloads every weight and resets the prefix cache: tests/inference/test_tied_reload.py and the
reload checks show that equals a fresh load). So a test may load other weights into it, but must not kill it or
change anything else about it (flags, LoRA adapters); tests that do must start their own (`start_server`).
A module that is the only user of its server stops it when it is done (`close`), so it does not hold its GiBs of
RAM until the end of the session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from prime_rl.inference.server import VllmServer

PRESTART_NICE = 10  # above the session's own nice value while nobody waits for the server


def renice_group(pgid: int, extra: int) -> None:
    """Set every process of process group `pgid` to this process's nice value plus `extra`; only as root (going
    back down needs the privilege), else nothing."""
    if os.geteuid() != 0:
        return
    try:
        os.setpriority(os.PRIO_PGRP, pgid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + extra))
    except OSError:  # the group is gone (the server exited: its waiter reports it)
        pass


def _renice(srv: VllmServer, extra: int) -> None:
    if srv.child is not None:
        renice_group(srv.child.pid, extra)  # the child leads its own process group


def restore_base(base_url: str, model_dir: Path) -> None:
    """Make the server at `base_url` serve `model_dir`'s weights as version 0 (no-op when it already does)."""
    state = httpx.get(f"{base_url}/policy_version", timeout=30).json()
    if state["version"] == 0 and state["path"] in (None, str(model_dir)):
        return
    r = httpx.post(f"{base_url}/update_weights", json={"path": str(model_dir), "version": 0}, timeout=300)
    assert r.status_code == 200, f"restoring {model_dir} as version 0 failed: {r.text}"


class SharedServers:
    """Servers by (resolved model folder, vLLM flags); `close()` stops them all."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started = 0  # how many servers this session started
        self._servers: dict[tuple[str, str], tuple[VllmServer, Path]] = {}
        self._waiting: set[tuple[str, str]] = set()  # started, /health not yet seen
        self._on_close: list = []  # stops of servers a module prestarted itself (`on_close`)

    @staticmethod
    def _key(model_dir: str | Path, vllm: dict[str, Any]) -> tuple[str, str]:
        return str(Path(model_dir).resolve()), json.dumps(vllm, sort_keys=True, default=str)

    def prestart(self, model_dir: str | Path, **vllm: Any) -> None:
        """Spawn the server for `model_dir` with `vllm` overrides (as `start_server` takes them) without waiting
        for it; no-op when it is already there."""
        from prime_rl.inference.testing import tiny_server_config

        key = self._key(model_dir, vllm)
        if key in self._servers:
            return
        opts = {k: vllm[k] for k in ("port", "health_timeout_s") if k in vllm}
        flags = {k: v for k, v in vllm.items() if k not in opts}
        srv = VllmServer(tiny_server_config(model_dir, **opts, **flags),
                         log_path=self.log_dir / f"vllm-{len(self._servers)}.log")  # fmt: skip
        srv.start()
        _renice(srv, PRESTART_NICE)  # its children inherit it when vLLM spawns them
        self._servers[key] = (srv, Path(model_dir))
        self._waiting.add(key)
        self.started += 1

    def get(self, model_dir: str | Path, **vllm: Any) -> VllmServer:
        """The shared server for `model_dir` with `vllm` overrides (as `start_server` takes them), started on first
        use (or earlier by `prestart`), serving the folder's weights as policy version 0."""
        key = self._key(model_dir, vllm)
        self.prestart(model_dir, **vllm)
        srv, served = self._servers[key]
        if key in self._waiting:
            _renice(srv, 0)  # a test waits for it now
            try:
                srv.wait_healthy()  # ServerStartError names the log and shows its tail
            except BaseException:
                self.close(model_dir, **vllm)
                raise
            self._waiting.discard(key)
        restore_base(srv.base_url, served)
        return srv

    def on_close(self, stop) -> None:
        """Call `stop()` when every server is stopped (`close()` without arguments; at the latest when the session
        ends): for a process a module's `prestart_vllm` started itself, so nothing outlives the session."""
        self._on_close.append(stop)

    def close(self, model_dir: str | Path | None = None, **vllm: Any) -> None:
        """Stop the server for `model_dir` with `vllm` overrides (no-op when there is none), or every server."""
        keys = list(self._servers) if model_dir is None else [self._key(model_dir, vllm)]
        for key in keys:
            if key in self._servers:
                srv, _ = self._servers.pop(key)
                self._waiting.discard(key)
                srv.stop()
        if model_dir is None:
            while self._on_close:
                self._on_close.pop()()
