"""Start a real vLLM server in tests and scripts (one at a time on CPU: each engine takes a few GiB of RAM).

    from prime_rl.inference.testing import start_server
    from prime_rl.models.tiny import cached_tiny_model

    @pytest.fixture(scope="module")
    def server(tmp_path_factory):
        with start_server(cached_tiny_model(), log_path=tmp_path_factory.mktemp("vllm") / "vllm.log") as srv:
            yield srv            # srv.base_url, srv.log_path, srv.cfg; stopped (process group killed) on exit

Start-up takes tens of seconds on a CPU; share one server per test module.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prime_rl.config.inference import InferenceConfig
from prime_rl.inference.server import VllmServer
from prime_rl.ports import free_port


def tiny_server_config(model_dir: str | Path, port: int | None = None, health_timeout_s: float = 240,
                       server: dict[str, Any] | None = None, **vllm: Any) -> InferenceConfig:  # fmt: skip
    """InferenceConfig for a small CPU test server: 1 GiB KV cache, max_model_len 2048, 64 sequences, fp32/eager
    (CPU defaults), `vllm` overrides any [inference.vllm] field, `server` any [inference.server] field. Test
    servers load weights from any folder (`server.any_weights_path`) unless `server` names a `weights_dir`."""
    srv = {"port": port or free_port(), "health_timeout_s": health_timeout_s, **(server or {})}
    srv.setdefault("any_weights_path", "weights_dir" not in srv)
    vllm_cfg = {"kv_cache_space_gb": 1, "max_model_len": 2048, "max_num_seqs": 64, **vllm}
    return InferenceConfig(model={"name": str(model_dir)}, server=srv, vllm=vllm_cfg)


@contextmanager
def start_server(
    model_dir: str | Path, port: int | None = None, log_path: str | Path | None = None, health_timeout_s: float = 240,
    server: dict[str, Any] | None = None, **vllm: Any,
) -> Iterator[VllmServer]:
    """Start vLLM (with prime-rl's routes and worker extension) for `model_dir` (settings as `tiny_server_config`),
    wait until healthy (at most `health_timeout_s`), yield the `VllmServer`, and always stop its whole process
    group. Raises ServerStartError with the log's tail."""
    cfg = tiny_server_config(model_dir, port, health_timeout_s, server, **vllm)
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="prime-rl-vllm-")) / "vllm.log"
    with VllmServer(cfg, log_path=log_path) as srv:
        yield srv
