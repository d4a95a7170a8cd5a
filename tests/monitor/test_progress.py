"""Progress: a rich bar with count/total, elapsed and ETA in a pseudo-terminal (log lines printed above it), plain
log lines when stderr is not a terminal; the SFT command's rendering and step bars in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time

from prime_rl.monitor.progress import Progress, eta_seconds, format_duration, mean_rate_eta_column

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")

SCRIPT = """
import logging, time
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.progress import Progress
log = setup_logging("demo")
with Progress("rendering", total=4, unit="conversations", log_every_s=0.0) as p:
    for i in range(4):
        time.sleep(0.05)
        if i == 1:
            log.info("a log line while the bar runs")
        p.advance()
"""


def run_in_pty(argv: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run `argv` with stdin/stdout/stderr on a pseudo-terminal; return everything it wrote (ANSI kept)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PRIME_RL_PROGRESS", "RANK")}
    env.update(COLUMNS="120", TERM="xterm-256color", **extra)
    return env


def test_bar_in_a_pseudo_terminal_with_log_lines_above_it():
    out = run_in_pty([sys.executable, "-c", SCRIPT], env=_env())
    plain = ANSI.sub("", out)
    assert "\x1b[" in out  # drawn with terminal control sequences
    assert "rendering" in plain and "4/4" in plain and "conversations" in plain and "eta" in plain
    assert "━" in plain  # the bar itself
    assert "a log line while the bar runs" in plain
    assert "rendering 2/4" not in plain  # no log-mode lines on a terminal


def test_log_lines_when_not_a_terminal():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "\x1b[" not in r.stderr and "━" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "rendering " in ln]
    assert any("rendering 1/4 conversations (25%)" in ln and "eta" in ln for ln in lines), lines
    assert "rendering 4/4 conversations (100%)" in lines[-1] and lines[-1].endswith("(done)")


def test_line_eta_and_durations():
    assert format_duration(3725) == "1h 2m 5s" and format_duration(83) == "1m 23s" and format_duration(7) == "7s"
    assert eta_seconds(10, 40, 20.0) == 60.0 and eta_seconds(0, 40, 5.0) is None and eta_seconds(3, None, 5.0) is None
    p = Progress("x", total=None, unit="items")
    p.done = 3
    assert p.line().startswith("x 3 items, ")
    w = Progress("starting inference", total=600, unit="s (timeout)", show_eta=False)
    w.done = 30
    assert "30/600 s (timeout) (5%)" in w.line() and "eta" not in w.line()


def test_sft_in_a_pseudo_terminal_shows_rendering_and_step_bars(tiny_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"say {w}"},
                                                     {"role": "assistant", "content": w}]}) + "\n"
                            for w in ("ab", "cd", "ef", "gh")))  # fmt: skip
    out = run_in_pty([sys.executable, "-m", "prime_rl.cli.sft", "--model.name", str(tiny_model_dir), "--data.path",
                      str(data), "--data.batch-size", "2", "--max-steps", "3", "--seq-len", "64", "--threads", "1",
                      "--output-dir", str(tmp_path / "run")], env=_env())  # fmt: skip
    plain = ANSI.sub("", out)
    assert "rendering" in plain and "4/4" in plain and "conversations" in plain
    assert "sft" in plain and "3/3" in plain and "steps" in plain and "eta" in plain
    assert re.search(r"Step 3/3 \| Loss \d", plain), plain[-2000:]
    log = (tmp_path / "run" / "logs" / "sft.log").read_text()
    assert "Step 1/3 | Loss" in log and "━" not in log  # the log file gets lines, never the bar
    assert (tmp_path / "run" / "plots" / "loss.png").is_file() and "plots in" in plain  # plotted at the end



def test_eval_server_wait_shows_seconds_and_passes_results_and_errors_through():
    import asyncio

    import pytest

    from prime_rl.orchestrator.eval_cmd import wait_with_progress

    async def ready():
        await asyncio.sleep(1.2)
        return 7

    async def down():
        await asyncio.sleep(0.1)
        raise TimeoutError("inference at http://x did not answer /health")

    t0 = time.monotonic()
    assert asyncio.run(wait_with_progress(ready(), "waiting for inference")) == 7
    assert 1.1 < time.monotonic() - t0 < 5
    with pytest.raises(TimeoutError, match="did not answer"):
        asyncio.run(wait_with_progress(down(), "waiting for inference"))


def test_trainer_and_orchestrator_step_lines_share_one_format():
    """`Step N/M | Title value | ...` from both processes (the trainer printed `step N/M | loss ...`)."""
    from prime_rl.monitor.progress import metric_title, step_line
    from prime_rl.orchestrator.step_metrics import step_line as orchestrator_line

    m = {"reward": 0.75, "step_time_s": 83.0, "trainable": 32, "num_rollouts": 32, "trainable_pct": 100.0,
         "turns": 3.9, "max_off_policy": 1, "error_pct": 0.0, "truncated_pct": 12.5}  # fmt: skip
    assert orchestrator_line(12, m, 50).startswith("Step 12/50 | 1m 23s | Reward 0.7500 | Trainable 32/32 (100.0%)")
    assert step_line(4, 10, ["Loss 0.1000"]) == "Step 4/10 | Loss 0.1000" and step_line(4, None, []) == "Step 4"
    assert [metric_title(k) for k in ("grad_norm", "mismatch_kl", "epoch")] == ["Grad Norm", "Mismatch KL", "Epoch"]


def test_bar_eta_is_the_mean_rate_after_a_burst(monkeypatch):
    """32 of 64 rollouts finish together after 2 s: the bar's ETA is 2 s (mean rate since the start), and stays
    near the mean-rate value while the next burst runs, instead of rich's near-zero value from the burst's
    instantaneous rate (TimeRemainingColumn: 0-1 s here, shown until the next burst)."""
    from rich.progress import Progress as Bar

    now = [0.0]
    column = mean_rate_eta_column()
    bar = Bar(column, get_time=lambda: now[0], auto_refresh=False, disable=True)
    task_id = bar.add_task("eval rollouts", total=64)
    task = bar.tasks[0]
    assert column.render(task).plain == "-"  # nothing done: no rate yet
    now[0] = 2.0
    for _ in range(32):  # one burst: 1 ms apart
        now[0] += 0.001
        bar.update(task_id, advance=1)
    assert column.render(task).plain == "2s" and task.time_remaining <= 1  # rich's own estimate: the burst's rate
    now[0] = 10.0  # no rollout finished since: 32 done in 10 s, 32 to go
    assert column.render(task).plain == "10s"
    bar.update(task_id, completed=64)
    assert column.render(task).plain == ""
    monkeypatch.setenv("PRIME_RL_PROGRESS", "bar")
    with Progress("x", total=4, unit="items") as shown:  # the bar draws this column, not rich's
        assert any(type(c).__name__ == "MeanRateRemaining" for c in shown._bar.columns)
