"""SIGTERM to the orchestrator closes every open episode's session on the resources server (issue 13 D)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.orchestrator.fakes import CounterEnv

from prime_rl.envs.nemo_gym.rows import task_to_row
from prime_rl.envs.nemo_gym.server import ServerState, serve_in_thread

REPO = Path(__file__).resolve().parents[2]


def test_sigterm_closes_every_open_session(tmp_path):
    env = CounterEnv(8)
    rows = tmp_path / "train.jsonl"
    rows.write_text("".join(json.dumps(task_to_row(t)) + "\n" for t in env.tasks("train")))
    (tmp_path / "eval.jsonl").write_text(rows.read_text())
    state = ServerState(env=CounterEnv(8), idle_timeout_s=None)  # no reaping: only a close ends a session
    with serve_in_thread(state) as url:
        pythonpath = os.pathsep.join([str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
        proc = subprocess.Popen([sys.executable, "-m", "tests.orchestrator.sigterm_child", url, str(rows),
                                 str(tmp_path / "run")], cwd=REPO, env={**os.environ, "PYTHONPATH": pythonpath},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 240  # the child imports transformers: slow on a loaded 2-core machine
            while len(state.live) < 8:  # batch_size 8 rollouts in flight, each with a seeded session
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, f"only {len(state.live)} sessions opened"
                time.sleep(0.05)
            time.sleep(0.3)
            before = len(state.live)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        out = proc.stdout.read()
        assert before >= 8
        assert len(state.live) == 0, f"{len(state.live)} of {before} sessions still open after SIGTERM\n{out[-2000:]}"
        assert code == 143, out[-2000:]
        assert all(t.reason == "session was closed" for t in state.store.ended.values())
