"""Helpers to run the real prime-rl processes (trainer, orchestrator, env-server) against a real vLLM server in
integration tests and benchmarks: config files, process groups that are always killed, health waits with
timeouts naming what they waited for, and a check that nothing is left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def child_env() -> dict[str, str]:
    """The environment of child processes: the repository root importable (for `tests.integration.fast_env`),
    one intra-op thread (2 shared cores)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def start(args: list[str], log: Path) -> subprocess.Popen:
    """Start `args` in its own process group, stdout+stderr to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as f:
        return subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=child_env(),
                                start_new_session=True)  # fmt: skip


def stop(proc: subprocess.Popen, grace_s: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Signal `proc`'s whole process group, SIGKILL it after `grace_s`, reap it (no-op when it already exited)."""
    for s, wait in ((sig, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, s)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the group may outlive its leader
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else f"({path} missing)"


def wait_all(procs: dict[str, tuple[subprocess.Popen, Path]], timeout_s: float) -> None:
    """Wait until every process exited 0. Raises AssertionError naming the first one that failed (with its log's
    tail) or, after `timeout_s`, the ones still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        for name, (p, log) in procs.items():
            rc = p.poll()
            if rc not in (None, 0):
                raise AssertionError(f"{name} exited {rc}:\n{tail(log)}")
        if all(p.poll() == 0 for p, _ in procs.values()):
            return
        if time.monotonic() > deadline:
            running = [n for n, (p, _) in procs.items() if p.poll() is None]
            logs = "\n".join(f"--- {n}:\n{tail(procs[n][1], 1500)}" for n in running)
            raise AssertionError(f"still running after {timeout_s:.0f} s: {running}\n{logs}")
        time.sleep(0.2)


def leftovers(marker: str) -> list[str]:
    """Live processes whose command line mentions `marker` (e.g. the test's tmp dir)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                out.append(f"{p.pid}: {' '.join(p.info['cmdline'])[:150]}")
        except psutil.Error:
            pass
    return out


def reset_policy(base_url: str, model_dir: Path) -> None:
    """Load the base weights into the (shared) vLLM server as policy version 0, so a test starts on-policy."""
    r = httpx.post(f"{base_url}/update_weights", json={"path": str(model_dir), "version": 0}, timeout=120)
    assert r.status_code == 200, r.text


def wait_health(url: str, timeout_s: float, what: str) -> dict:
    """GET `url`/health until 200; returns its JSON. TimeoutError names `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", timeout=2)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} at {url} not healthy within {timeout_s} s")


def write_gridsim_rows(out: Path) -> Path:
    """`env-server write gridsim out` (the packaged ERCOT days); returns the server directory."""
    subprocess.run([PY, "-m", "prime_rl.cli.env_server", "write", "gridsim", str(out)], check=True, cwd=REPO,
                   env=child_env(), capture_output=True, timeout=300)  # fmt: skip
    return out / "resources_servers" / "gridsim_v1"


def serve_env(server_dir: Path, port: int, log: Path, timeout_s: float = 60) -> subprocess.Popen:
    """`env-server serve server_dir --port port`, waited for until /health answers."""
    p = start([PY, "-m", "prime_rl.cli.env_server", "serve", str(server_dir), "--port", str(port)], log)
    try:
        wait_health(f"http://127.0.0.1:{port}", timeout_s, "env-server")
    except BaseException:
        stop(p)
        raise
    return p


def trainer_toml(path: Path, *, run: Path, model: Path, seq_len: int, max_steps: int, lr: float) -> Path:
    path.write_text(f"""
output_dir = "{run}"
max_steps = {max_steps}
seq_len = {seq_len}
threads = 1
data_timeout_s = 300
[model]
name = "{model}"
[optim]
lr = {lr}
""")
    return path


def orchestrator_toml(
    path: Path, *, run: Path, model: Path, base_url: str, source: str, batch_size: int, group_size: int,
    max_tokens: int, seq_len: int, max_steps: int, async_level: int, extra: str = "",
) -> Path:
    """An orchestrator config; `source` is the body of one `[[train.source]]` table (TOML lines)."""
    path.write_text(f"""
output_dir = "{run}"
max_steps = {max_steps}
seq_len = {seq_len}
batch_size = {batch_size}
max_async_level = {async_level}
weights_timeout_s = 300
traces_per_step = {batch_size}
[model]
name = "{model}"
[client]
base_url = ["{base_url}"]
request_timeout_s = 120
[concurrency]
max_inflight = {batch_size}
[train]
group_size = {group_size}
[train.sampling]
max_completion_tokens = {max_tokens}
[[train.source]]
{source}
{extra}
""")
    return path
