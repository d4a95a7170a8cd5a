"""The dashboard's token and its warning on a bind other than loopback: with `--token`, every route (the page
too) answers 401 unless the request carries the token (`?token=` or a bearer header); without one, a wide bind
warns on stderr."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
from fastapi.testclient import TestClient
from tests.monitor.test_dashboard import Run

from prime_rl.monitor.dashboard import create_app, exposure_warning, token_matches
from prime_rl.ports import free_port


def test_token_matches_header_or_query():
    assert token_matches("t0k", "Bearer t0k", None) and token_matches("t0k", "bearer t0k", None)
    assert token_matches("t0k", None, "t0k") and token_matches("t0k", "Bearer wrong", "t0k")
    assert not any([token_matches("t0k", None, None), token_matches("t0k", "Bearer t0", None),
                    token_matches("t0k", "Basic t0k", None), token_matches("t0k", None, "")])  # fmt: skip


def test_exposure_warning():
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("localhost", None) is None
    assert exposure_warning("0.0.0.0", "t") is None
    assert "binding 0.0.0.0 without --token: anyone who reaches the port can read this run" in exposure_warning(
        "0.0.0.0", None)


def test_every_route_needs_the_token(tmp_path):
    run = Run(tmp_path / "run", steps=2)
    run.step(1)
    client = TestClient(create_app(run.root, token="t0k"))
    for path in ("/", "/api/state", "/favicon.ico"):
        r = client.get(path)
        assert r.status_code == 401 and "needs its token" in r.json()["error"], path
    assert client.get("/api/state", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert "<title>prime-rl dashboard</title>" in client.get("/?token=t0k").text
    assert client.get("/api/state", headers={"Authorization": "Bearer t0k"}).json()["latest_step"]["orchestrator"] == 1
    open_client = TestClient(create_app(run.root))  # no token: open, as on loopback by default
    assert open_client.get("/api/state").status_code == 200


def _serve(run_root, *args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "prime_rl.cli.prime_rl", "dashboard", str(run_root), "--port",
                          str(port), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert p.poll() is None, p.stderr.read()
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return p, port
        except httpx.HTTPError:
            time.sleep(0.2)
    p.kill()
    raise AssertionError("dashboard did not answer in 60 s")


def test_dashboard_command_warns_on_a_wide_bind_and_enforces_its_token(tmp_path):
    run = Run(tmp_path / "run", steps=2)
    run.step(1)
    p, _ = _serve(run.root, "--host", "0.0.0.0")
    p.terminate()
    _, err = p.communicate(timeout=30)
    assert "warning: binding 0.0.0.0 without --token" in err

    p, port = _serve(run.root, "--host", "0.0.0.0", "--token", "t0k")
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/api/state", timeout=5).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/api/state?token=t0k", timeout=5).status_code == 200
    finally:
        p.terminate()
        out, err = p.communicate(timeout=30)
    assert "warning" not in err and f"on http://0.0.0.0:{port}/?token=TOKEN" in out
