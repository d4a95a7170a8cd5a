"""The `rl` supervision path on fake children: clean end at max_steps, a child dying, Ctrl-C/SIGTERM, no orphans."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fake_children import fake_launch

from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import ChildFailed, LaunchError
from prime_rl.launcher.rl import launch_and_wait, supervise
from prime_rl.launcher.supervisor import Supervisor
from prime_rl.ports import free_port
from prime_rl.process import ChildSpec

FAKE = str(Path(__file__).with_name("fake_children.py"))


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def read_pid(p: Path, timeout: float = 20) -> int:
    t0 = time.time()
    while not p.exists():
        assert time.time() - t0 < timeout
        time.sleep(0.05)
    return int(p.read_text())


def cfg_for(tmp_path: Path, steps: int = 3) -> RLConfig:
    return RLConfig(max_steps=steps, output_dir=str(tmp_path), stop_grace_s=1.0, startup_timeout_s=30)


def test_clean_end_when_trainer_and_orchestrator_finish(tmp_path, capsys):
    pidfile = tmp_path / "gc.pid"
    launch = fake_launch(str(tmp_path), free_port(), ["3", "--step-s", "0.05"], ["3", "--step-s", "0.3"],
                         grandchild=str(pidfile))
    cfg = cfg_for(tmp_path)
    t0 = time.monotonic()
    code = launch_and_wait(cfg, lambda c: launch)
    assert code == 0
    assert time.monotonic() - t0 < 20
    err = capsys.readouterr().err
    for i in (1, 2, 3):  # every step line streamed to the console, without the log prefix
        assert err.count(f"Step {i} | 0m 1s | Reward 0.{i}000") == 1  # printed once although logged twice
    assert "3/3" in err  # the progress bar reached max_steps
    assert gone(read_pid(pidfile))  # the server's grandchild (SIGTERM-ignoring) is gone too
    assert "trainer done" in (tmp_path / "logs" / "trainer.console.log").read_text()


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_child_death_exits_nonzero_naming_it(tmp_path):
    h = Collect()
    logging.getLogger("prime_rl.rl").addHandler(h)
    pidfile = tmp_path / "gc.pid"
    # the trainer SIGKILLs itself at its step 2 while the orchestrator still has work
    launch = fake_launch(str(tmp_path), free_port(), ["10", "--step-s", "0.3", "--die-at", "2"],
                         ["10", "--step-s", "0.3"], grandchild=str(pidfile))
    try:
        code = launch_and_wait(cfg_for(tmp_path, 10), lambda c: launch)
    finally:
        logging.getLogger("prime_rl.rl").removeHandler(h)
    assert code == 1
    text = "\n".join(h.lines)
    assert "trainer died (killed by SIGKILL)" in text
    assert "trainer about to be killed at step 2" in text  # the last lines of its log
    assert str(tmp_path / "logs" / "trainer.console.log") in text
    assert gone(read_pid(pidfile))


def test_server_exit_zero_is_a_failure(tmp_path):
    launch = fake_launch(str(tmp_path), free_port(), ["50", "--step-s", "0.1"], ["50", "--step-s", "0.1"],
                         server=["--die-after", "1.0"])
    with pytest.raises(ChildFailed) as ei:
        supervise(cfg_for(tmp_path, 50), launch, console_view=False)
    assert ei.value.name == "inference" and ei.value.code == 7 and "boom" in ei.value.tail


def test_finisher_nonzero_and_finish_timeout(tmp_path):
    with Supervisor(grace_s=0.5) as sup:
        sup.start(ChildSpec("trainer", [sys.executable, FAKE, "worker", "trainer", "1", "--exit", "3"], tmp_path / "t.log"))
        with pytest.raises(ChildFailed) as ei:
            sup.wait_done({"trainer"}, finish_timeout_s=10)
    assert "trainer died (exit code 3)" in str(ei.value) and "trainer done" in str(ei.value)
    with Supervisor(grace_s=0.5) as sup:
        sup.start(ChildSpec("trainer", [sys.executable, FAKE, "worker", "trainer", "1", "--step-s", "0"], tmp_path / "t2.log"))
        sup.start(ChildSpec("orchestrator", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "o.log"))
        t0 = time.monotonic()
        with pytest.raises(LaunchError) as ei:
            sup.wait_done({"trainer", "orchestrator"}, finish_timeout_s=1.0)
        assert time.monotonic() - t0 < 15
    msg = str(ei.value)
    assert "trainer finished but orchestrator did not exit within 1 s" in msg and "o.log" in msg
    assert all(c.poll() is not None for c in sup.children.values())


def test_stop_order(tmp_path):
    with Supervisor(grace_s=0.5) as sup:
        for name in ("env-server", "inference", "trainer", "orchestrator"):
            sup.start(ChildSpec(name, [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / f"{name}.log"))
        order = []
        for c in sup.children.values():
            orig = c.stop
            c.stop = lambda g, _o=orig, _n=c.name: (order.append(_n), _o(g))[1]
    assert order == ["orchestrator", "trainer", "inference", "env-server"]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_everything(tmp_path, sig, code):
    pidfile = tmp_path / "gc.pid"
    port = free_port()
    p = subprocess.Popen([sys.executable, FAKE, "rl", str(tmp_path), str(port), str(pidfile), "100", "100"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        gc = read_pid(pidfile)
        log = tmp_path / "logs" / "orchestrator.console.log"
        t0 = time.time()
        while "Step 1 |" not in (log.read_text() if log.exists() else ""):
            assert time.time() - t0 < 30, "orchestrator never started"
            time.sleep(0.1)
        kids = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
        assert len(kids) >= 4  # inference, its grandchild, trainer, orchestrator
        os.kill(p.pid, sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == code, err
    assert json.loads(out.strip().splitlines()[-1]) == {"exit": code}
    assert "received: stopped every process of the run" in err
    assert all(gone(k) for k in kids + [gc])


def test_a_replica_may_die_while_another_runs(tmp_path):
    """Inference replicas are expendable while one of them runs (the orchestrator routes around a dead one); the
    last one dying is a failure as before."""
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    with Supervisor(grace_s=0.5) as sup:
        sup.expendable = {"inference", "inference-1"}
        sup.start(ChildSpec("inference", sleep, tmp_path / "i0.log"))
        sup.start(ChildSpec("inference-1", [sys.executable, "-c", "raise SystemExit(9)"], tmp_path / "i1.log"))
        sup.children["inference-1"].popen.wait(10)
        sup.check({"trainer", "orchestrator"})  # no raise: inference still runs
        assert sup.lost == {"inference-1"}
        sup.children["inference"].popen.kill()
        sup.children["inference"].popen.wait(10)
        with pytest.raises(ChildFailed) as ei:
            sup.check({"trainer", "orchestrator"})
    assert ei.value.name == "inference"


def test_a_child_rl_stops_is_named_neutrally(tmp_path, caplog):
    """A child rl stopped reads as rl's stop, not as a crash ("killed by SIGTERM")."""
    from prime_rl.launcher.supervisor import describe_stop

    assert describe_stop(-signal.SIGTERM, 10.0) == "SIGTERM from rl at the end of the run"
    assert describe_stop(-signal.SIGKILL, 2.5) == "SIGKILL from rl after 2.5s"
    assert describe_stop(0, 10.0) == "exit code 0" and describe_stop(None, 10.0) == "gone"
    sup = Supervisor(grace_s=5.0)
    sup.start(ChildSpec("env-server", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "env.log"))
    with caplog.at_level(logging.INFO, logger="prime_rl.rl"):
        assert sup.stop_all() == []
    assert "stopped env-server (SIGTERM from rl at the end of the run)" in caplog.text
    assert "killed by" not in caplog.text
