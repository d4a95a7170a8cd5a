"""Small stand-ins for the real children, so the launcher's supervision is tested without the stack.

    python fake_children.py server PORT [--grandchild PIDFILE] [--ignore-term] [--die-after S]
    python fake_children.py worker NAME STEPS [--step-s S] [--exit CODE] [--die-at STEP] [--grandchild PIDFILE]
                                              [--metrics RUN_DIR]

`server` answers GET /health with 200 on 127.0.0.1:PORT. `worker` prints `Step i | Reward ...` lines (the
orchestrator's format) and exits with CODE after STEPS steps, or SIGKILLs itself at step `--die-at`.
`--grandchild PIDFILE` forks a `sleep` grandchild that ignores SIGTERM and writes its pid to PIDFILE, so tests
can check the launcher also kills what its children started. `--metrics RUN_DIR` also appends a metrics.jsonl row
per step (trainer: loss 1/step; orchestrator: reward step/10, with a traces.jsonl of one rollout) as the real ones do.
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading
import time


def spawn_grandchild(pidfile: str) -> None:
    code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    p = subprocess.Popen([sys.executable, "-c", code])
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(p.pid))
    os.replace(pidfile + ".tmp", pidfile)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok", "max_concurrent": 8}' if ok else b"")

    def log_message(self, *a):
        pass


def write_step_metrics(run_dir: str, name: str, step: int) -> None:
    import json
    from pathlib import Path

    from prime_rl.monitor.metrics import MetricsWriter

    if name == "orchestrator":
        traces = Path(run_dir) / "rollouts" / f"step_{step}" / "traces.jsonl"
        traces.parent.mkdir(parents=True, exist_ok=True)
        msgs = [{"role": "user", "content": f"task {step}"}, {"role": "assistant", "content": "answer"}]
        traces.write_text(json.dumps({"step": step, "task_id": f"t{step}", "reward": step / 10, "messages": msgs}) + "\n")
        MetricsWriter(Path(run_dir), name).log(step, {"reward": step / 10})
    else:
        MetricsWriter(Path(run_dir), name).log(step, {"loss": 1 / step})


def fake_launch(run_dir: str, port: int, trainer: list[str], orchestrator: list[str], server: list[str] | None = None,
                grandchild: str | None = None):
    """A `Launch` whose children are this script: a health server as `inference`, workers as trainer and
    orchestrator. Extra argv for each is appended."""
    from pathlib import Path

    from prime_rl.launcher.rl import Launch
    from prime_rl.monitor.rundir import RunDir
    from prime_rl.process import ChildSpec

    run = RunDir(Path(run_dir))
    me = [sys.executable, os.path.abspath(__file__)]
    srv = me + ["server", str(port)] + (server or []) + (["--grandchild", grandchild] if grandchild else [])
    specs = {
        "inference": ChildSpec("inference", srv, run.log_file("inference.console")),
        "trainer": ChildSpec("trainer", me + ["worker", "trainer"] + trainer, run.log_file("trainer.console")),
        "orchestrator": ChildSpec("orchestrator", me + ["worker", "orchestrator"] + orchestrator,
                                  run.log_file("orchestrator.console")),
    }
    return Launch(run=run, specs=specs, health={"inference": f"http://127.0.0.1:{port}/health"})


def drive(argv: list[str]) -> None:
    """`fake_children.py rl RUN_DIR PORT GRANDCHILD_PIDFILE TRAINER_STEPS ORCH_STEPS`: `launch_and_wait` on fakes."""
    import json

    from prime_rl.config.rl import RLConfig
    from prime_rl.launcher.rl import launch_and_wait
    from prime_rl.monitor.logger import setup_logging

    run_dir, port, pidfile, nt, no = argv
    cfg = RLConfig(max_steps=int(no), output_dir=run_dir, stop_grace_s=1.0, startup_timeout_s=30)
    setup_logging("rl", None)
    code = launch_and_wait(cfg, lambda c: fake_launch(run_dir, int(port), [nt, "--step-s", "0.5"],
                                                      [no, "--step-s", "0.5"], grandchild=pidfile))
    print(json.dumps({"exit": code}), flush=True)
    sys.exit(code)


def main() -> None:
    if sys.argv[1:2] == ["rl"]:
        return drive(sys.argv[2:])
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="kind", required=True)
    s = sub.add_parser("server")
    s.add_argument("port", type=int)
    s.add_argument("--grandchild")
    s.add_argument("--ignore-term", action="store_true")
    s.add_argument("--die-after", type=float)
    s.add_argument("--delay", type=float, default=0.0)
    w = sub.add_parser("worker")
    w.add_argument("name")
    w.add_argument("steps", type=int)
    w.add_argument("--step-s", type=float, default=0.1)
    w.add_argument("--exit", type=int, default=0)
    w.add_argument("--die-at", type=int)
    w.add_argument("--grandchild")
    w.add_argument("--metrics")
    a = ap.parse_args()
    if getattr(a, "grandchild", None):
        spawn_grandchild(a.grandchild)
    if a.kind == "server":
        if a.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"fake server starting on {a.port}", flush=True)
        time.sleep(a.delay)
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Health)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        t0 = time.time()
        while a.die_after is None or time.time() - t0 < a.die_after:
            time.sleep(0.05)
        print("fake server crashing: boom", flush=True)
        os._exit(7)
    for i in range(1, a.steps + 1):
        time.sleep(a.step_s)
        if a.die_at == i:
            print(f"{a.name} about to be killed at step {i}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if a.metrics:
            write_step_metrics(a.metrics, a.name, i)
        if a.name == "orchestrator":
            # like the real one: the step line on stdout and through the logger on stderr
            print(f"Step {i} | 0m 1s | Reward 0.{i}000 | Error 0.0%", flush=True)
            print(f"12:00:00 INFO [orchestrator] Step {i} | 0m 1s | Reward 0.{i}000 | Error 0.0%", file=sys.stderr,
                  flush=True)
        else:
            print(f"{a.name} trained step {i}", flush=True)
    print(f"{a.name} done", flush=True)
    sys.exit(a.exit)


if __name__ == "__main__":
    main()
