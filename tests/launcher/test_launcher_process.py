"""Child processes: own session, own log, whole-group stop, no orphans (checked with psutil), health waits."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from prime_rl.launcher.errors import ChildFailed, LaunchError
from prime_rl.launcher.health import wait_healthy
from prime_rl.ports import free_port
from prime_rl.process import Child, ChildSpec, describe_exit, tail_file

FAKE = str(Path(__file__).with_name("fake_children.py"))


def wait_file(p: Path, timeout: float = 20.0) -> str:
    t0 = time.time()
    while not p.exists():
        assert time.time() - t0 < timeout, f"{p} never appeared"
        time.sleep(0.05)
    return p.read_text()


def test_child_runs_in_own_session_and_logs(tmp_path):
    spec = ChildSpec("w", [sys.executable, "-c", "import os,sys; print('sid', os.getsid(0)); print('err', file=sys.stderr)"],
                     tmp_path / "logs" / "w.log")
    c = Child(spec)
    assert c.popen.wait(10) == 0
    c.stop(1)
    text = (tmp_path / "logs" / "w.log").read_text()
    assert f"sid {c.pid}" in text  # the child leads its own session: sid == its pid
    assert os.getsid(0) != c.pid
    assert "err" in text and "starting w" in text


def test_stop_kills_group_and_term_ignoring_grandchild(tmp_path):
    port = free_port()
    pidfile = tmp_path / "gc.pid"
    spec = ChildSpec("srv", [sys.executable, FAKE, "server", str(port), "--grandchild", str(pidfile), "--ignore-term"],
                     tmp_path / "srv.log")
    c = Child(spec)
    gc = int(wait_file(pidfile))
    assert psutil.pid_exists(gc)
    t0 = time.monotonic()
    code = c.stop(grace_s=0.5)
    took = time.monotonic() - t0
    assert code == -9  # ignored SIGTERM, so SIGKILL after the grace period
    assert 0.5 <= took < 8
    assert not psutil.pid_exists(c.pid)
    assert not psutil.pid_exists(gc) or psutil.Process(gc).status() == psutil.STATUS_ZOMBIE
    assert c.alive_processes() == []


def test_stop_kills_grandchild_that_left_the_group(tmp_path):
    # the child starts a grandchild in a new session (outside its process group), then waits
    pidfile = tmp_path / "gc.pid"
    code = (
        "import subprocess,sys,time,os;"
        "p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)'],start_new_session=True);"
        f"open({str(pidfile)!r},'w').write(str(p.pid));time.sleep(600)"
    )
    c = Child(ChildSpec("w", [sys.executable, "-c", code], tmp_path / "w.log"))
    gc = int(wait_file(pidfile))
    assert os.getpgid(gc) != c.pid
    c.stop(grace_s=2)
    time.sleep(0.1)
    assert not psutil.pid_exists(gc) or psutil.Process(gc).status() == psutil.STATUS_ZOMBIE


def test_wait_healthy_ok_then_child_death_names_log(tmp_path):
    port = free_port()
    c = Child(ChildSpec("inference", [sys.executable, FAKE, "server", str(port), "--die-after", "1.0"], tmp_path / "i.log"))
    try:
        waited = wait_healthy(f"http://127.0.0.1:{port}/health", c, 20, "inference", interval_s=0.1)
        assert waited < 20
        time.sleep(1.5)
        assert c.poll() == 7
    finally:
        c.stop(1)
    # a child that dies before answering: ChildFailed with its exit code and last log lines
    c2 = Child(ChildSpec("inference", [sys.executable, "-c", "print('cuda oom here'); raise SystemExit(3)"],
                         tmp_path / "i2.log"))
    with pytest.raises(ChildFailed) as ei:
        wait_healthy(f"http://127.0.0.1:{free_port()}/health", c2, 20, "inference", interval_s=0.1)
    c2.stop(1)
    msg = str(ei.value)
    assert "inference died (exit code 3)" in msg and "cuda oom here" in msg and str(tmp_path / "i2.log") in msg


def test_wait_healthy_timeout_names_url_and_log(tmp_path):
    port = free_port()
    c = Child(ChildSpec("inference", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "slow.log"))
    try:
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as ei:
            wait_healthy(f"http://127.0.0.1:{port}/health", c, 0.6, "inference", interval_s=0.1)
        assert time.monotonic() - t0 < 5
    finally:
        c.stop(1)
    msg = str(ei.value)
    assert f"127.0.0.1:{port}/health" in msg and "slow.log" in msg and "startup_timeout_s" in msg


def test_tail_and_describe(tmp_path):
    p = tmp_path / "x.log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_file(p, 3).splitlines() == ["line 97", "line 98", "line 99"]
    assert tail_file(tmp_path / "missing", 3) == ""
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(2) == "exit code 2"
