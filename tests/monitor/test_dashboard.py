"""The live dashboard: its state read from a run directory (values checked by hand), and the page in a real
headless Chromium (Debian's chromium + chromium-driver, driven by selenium) following a run directory that a short
run is writing: it loads without console errors, shows the latest step, and updates."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from prime_rl.monitor.dashboard import create_app, eval_tables, health_urls, state
from prime_rl.monitor.metrics import MetricsWriter
from prime_rl.ports import free_port

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CALL = {"id": "c0", "type": "function", "function": {"name": "submit_schedule", "arguments": '{"schedule":[1,0]}'}}


def _trace(step: int, i: int) -> dict:
    msgs = [{"role": "user", "content": f"day {step}.{i}"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "name": "submit_schedule", "content": "score 0.800"}, {"role": "assistant", "content": "ok"}]
    return {"step": step, "task_id": f"t{step}-{i}", "source": "gridsim", "reward": 0.5 + 0.01 * step, "advantage": 0.1,
            "masked": False, "error": None, "turns": 2, "truncated": False, "policy_versions": [step - 1], "messages": msgs}


class Run:
    """A short run writing its run directory like the real processes do: configs first, then per step a trainer row,
    the traces and an orchestrator row; evals at step 0 and at the end."""

    def __init__(self, root: Path, steps: int, health_url: str | None = None):
        self.root, self.steps = root, steps
        (root / "configs").mkdir(parents=True)
        client = f'[client]\nbase_url = ["{health_url}"]\n' if health_url else ""
        (root / "configs" / "orchestrator.toml").write_text(f"max_steps = {steps}\n{client}")
        (root / "logs").mkdir()
        self.t, self.o = MetricsWriter(root, "trainer"), MetricsWriter(root, "orchestrator")
        self.e = MetricsWriter(root, "eval")

    def eval(self, step: int, avgs: list[float]) -> None:
        (self.root / "eval").mkdir(exist_ok=True)
        (self.root / "eval" / f"step_{step}.jsonl").write_text("".join(
            json.dumps({"step": step, "source": "gridsim", "task_id": f"e{i}", "avg": a, "pass": a >= 1.0,
                        "errors": []}) + "\n" for i, a in enumerate(avgs)))  # fmt: skip
        self.e.log(step, {"eval/avg@1": sum(avgs) / len(avgs)})

    def step(self, s: int) -> None:
        self.t.log(s, {"loss": 1.0 / s, "entropy": 1.5, "mismatch_kl": 1e-3, "grad_norm": 0.3, "lr": 1e-4,
                       "masked_frac": 0.01})  # fmt: skip
        d = self.root / "rollouts" / f"step_{s}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "traces.jsonl").write_text("".join(json.dumps(_trace(s, i)) + "\n" for i in range(2)))
        self.o.log(s, {"reward": 0.5 + 0.01 * s, "reward_std": 0.1, "num_rollouts": 8, "truncated_pct": 0.0,
                       "error_pct": 0.0, "max_off_policy": 1})  # fmt: skip
        with open(self.root / "logs" / "orchestrator.log", "a") as f:
            f.write(f"Step {s}/{self.steps} | 0m 1s | Reward {0.5 + 0.01 * s:.4f}\n")


def test_state_of_a_run_directory(tmp_path):
    run = Run(tmp_path / "run", steps=5, health_url="http://127.0.0.1:9/v1")
    run.eval(0, [0.5, 1.0, 0.0, 0.5])
    for s in (1, 2, 3):
        run.step(s)
    st = state(run.root, probe=lambda url: "healthy" if url.endswith("/health") else "?")
    assert st["latest_step"] == {"eval": 0, "trainer": 3, "orchestrator": 3} and st["max_steps"] == 5
    names = [p["name"] for p in st["panels"]]
    assert names[0] == "reward" and {"loss", "entropy", "mismatch_kl", "grad_norm", "lr", "masked", "off_policy"} <= set(names)
    reward = st["panels"][0]["lines"]
    assert reward[0]["points"][-1] == [3, pytest.approx(0.53), pytest.approx(0.1 / 8**0.5)]
    assert reward[1]["points"] == [[0, 0.5, pytest.approx((0.5 / 3) ** 0.5 / 2)]]  # sample sd of 0.5,1,0,0.5 / sqrt 4
    assert st["evals"] == [{"step": 0, "source": "gridsim", "tasks": 4, "avg": 0.5, "pass": 0.25, "errors": 0}]
    assert [r["step"] for r in st["rollouts"]] == [3, 3, 2, 2, 1, 1]  # newest first
    assert st["rollouts"][0]["messages"][1]["tool_calls"][0]["function"]["name"] == "submit_schedule"
    procs = {p["name"]: p for p in st["processes"]}
    assert procs["inference"]["health"] == "healthy" and procs["inference"]["url"] == "http://127.0.0.1:9/v1/health"
    assert procs["orchestrator"]["last_line"].startswith("Step 3/5") and procs["orchestrator"]["age_s"] < 60
    json.dumps(st, allow_nan=False)  # valid JSON for a browser


def test_health_urls_and_eval_tables_read_the_configs(tmp_path):
    cfg = {"orchestrator": {"client": {"base_url": ["http://a:1", "http://b:2/"]},
                            "train": {"source": [{"name": "g", "env": {"taskset": {"task": {"resources_url": "http://c:3"}}}}]}}}
    assert health_urls(cfg) == {"inference": "http://a:1/health", "inference-1": "http://b:2/health", "env g": "http://c:3/health"}
    from prime_rl.monitor.rundir import RunDir

    assert eval_tables(RunDir(tmp_path)) == []


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *a):
        pass


def _browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium and chromium-driver (.ci/run installs them)")
        pytest.skip("headless Chromium not installed: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1800"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=o)


def _wait(fn, timeout=30.0, what=""):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_page_follows_a_run_in_headless_chromium(tmp_path):
    import uvicorn

    hport = free_port()
    health = http.server.ThreadingHTTPServer(("127.0.0.1", hport), _Health)
    threading.Thread(target=health.serve_forever, daemon=True).start()
    run = Run(tmp_path / "run", steps=8, health_url=f"http://127.0.0.1:{hport}")
    run.eval(0, [0.5, 0.6])
    run.step(1)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(run.root), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    _wait(lambda: server.started, 20, "the dashboard server")
    driver = _browser()
    stop = threading.Event()

    def writer():  # the run goes on while the page is open
        for s in range(2, run.steps + 1):
            if stop.wait(0.7):
                return
            run.step(s)
        run.eval(run.steps, [0.9, 1.0])

    try:
        driver.get(f"http://127.0.0.1:{port}/")
        first = _wait(lambda: driver.find_element("id", "latest-step").text.strip("–"), 20, "the first step")
        threading.Thread(target=writer, daemon=True).start()
        _wait(lambda: driver.find_element("id", "latest-step").text == "8/8", 40, "the page to reach step 8/8")
        assert first != "8/8" and first.endswith("/8")  # it showed an earlier step, then updated
        text = driver.find_element("tag name", "body").text
        assert "Reward" in text and "Loss" in text and "Off-policy steps" in text
        assert "healthy" in text and "→ submit_schedule" in text and "step 8" in text
        evals = driver.find_element("id", "evals").text
        assert "0.9500" in evals and "0.5500" in evals  # both evals' task means
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert not errors, errors
        shot = tmp_path / "dashboard.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 20_000
        if os.environ.get("PRIME_RL_SAVE_SCREENSHOT"):
            shutil.copy(shot, os.environ["PRIME_RL_SAVE_SCREENSHOT"])
    finally:
        stop.set()
        driver.quit()
        server.should_exit = True
        health.shutdown()


def test_dashboard_command_serves_loopback_and_refuses_a_taken_port(tmp_path):
    import subprocess
    import sys

    import httpx

    run = Run(tmp_path / "run", steps=3)
    run.step(1)
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "prime_rl.cli.prime_rl", "dashboard", str(run.root), "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        def up():
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/state", timeout=1).json()
            except httpx.HTTPError:
                assert p.poll() is None, p.stdout.read()
                return None

        st = _wait(up, 60, "prime-rl dashboard")
        assert st["latest_step"]["orchestrator"] == 1 and st["max_steps"] == 3
        assert "<title>prime-rl dashboard</title>" in httpx.get(f"http://127.0.0.1:{port}/").text
        taken = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "dashboard", str(run.root), "--port",
                                str(port)], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert taken.returncode == 2 and str(port) in taken.stderr and "Traceback" not in taken.stderr
    finally:
        p.terminate()
        p.wait(timeout=30)
    out = p.stdout.read()
    assert f"on http://127.0.0.1:{port}" in out
