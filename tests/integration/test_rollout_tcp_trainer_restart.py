"""Rollouts over TCP across a restart of the trainer alone: the real orchestrator and trainer processes (the
session's vLLM on the tiny model, a fast one-turn environment), `rollout_transport.type = "tcp"`. The trainer is
SIGKILLed after its step-2 checkpoint and started again from its newest checkpoint K while the orchestrator keeps
running: the orchestrator, which kept every step after the trainer's checkpoint, hands it step K + 1 and each later
step once, and cuts every step once itself."""

from __future__ import annotations

import re
import signal
import time

import pytest
from tests.integration.stack import (
    PY,
    leftovers,
    orchestrator_toml,
    reset_policy,
    start,
    stop,
    tail,
    trainer_toml,
    wait_all,
)
from tests.integration.test_rl_stack import prestart_vllm, server, tiny  # noqa: F401 (fixtures, vLLM prestart)

from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

pytestmark = pytest.mark.slow


def test_trainer_restarted_alone_gets_each_step_after_its_checkpoint_once(tmp_path, tiny, server):  # noqa: F811
    reset_policy(server.base_url, tiny)
    run, steps = tmp_path / "run", 5
    transport = f'[rollout_transport]\ntype = "tcp"\nport = {free_port()}\n'
    tcfg = trainer_toml(tmp_path / "trainer.toml", run=run, model=tiny, seq_len=256, max_steps=steps, lr=0.05)
    tcfg.write_text(tcfg.read_text() + "[ckpt]\ninterval = 1\n" + transport)
    ocfg = orchestrator_toml(
        tmp_path / "orchestrator.toml", run=run, model=tiny, base_url=server.base_url,
        source='name = "fast"\nenv.id = "tests.integration.fast_env:FastEnv"', batch_size=8, group_size=4,
        max_tokens=12, seq_len=256, max_steps=steps, async_level=1, extra=transport,
    )  # fmt: skip
    trainer_cmd = [PY, "-m", "prime_rl.cli.trainer", "@", str(tcfg)]
    orch = start([PY, "-m", "prime_rl.cli.orchestrator", "@", str(ocfg)], tmp_path / "orch.out")
    first = start(trainer_cmd, tmp_path / "trainer1.out")
    try:
        t0 = time.time()
        while not (run / "checkpoints/step_2/trainer/STABLE").is_file():
            assert first.poll() is None and orch.poll() is None, tail(tmp_path / "trainer1.out") + tail(tmp_path / "orch.out")
            assert time.time() - t0 < 300, "no step-2 checkpoint in time"
            time.sleep(0.2)
        stop(first, sig=signal.SIGKILL)
        done = sorted(int(p.parent.parent.name.split("_")[1]) for p in run.glob("checkpoints/step_*/trainer/STABLE"))
        k = done[-1]
        second = start(trainer_cmd + ["--ckpt.resume-step", str(k)], tmp_path / "trainer2.out")
        wait_all({"trainer": (second, tmp_path / "trainer2.out"), "orchestrator": (orch, tmp_path / "orch.out")},
                 timeout_s=300)  # fmt: skip
    finally:
        for p in (orch, first):
            stop(p)
        if "second" in locals():
            stop(second)
    assert leftovers(str(tmp_path)) == []
    parts = (run / "logs/trainer.log").read_text().split(f"starting at step {k + 1}")
    assert len(parts) == 2, "the restarted trainer's start line, once"
    trained = [int(n) for n in re.findall(r"\bStep (\d+)/5 \|", parts[1])]
    assert trained == list(range(k + 1, steps + 1)), parts[1][-3000:]  # each step after the checkpoint, once, in order
    orch_rows = read_metrics(run, "orchestrator")
    assert [r["step"] for r in orch_rows] == [1, 2, 3, 4, 5]  # the orchestrator cut every step once
    # the restarted trainer trained the batches the orchestrator cut (its loss tokens, step by step)
    by_step = {r["step"]: r for r in read_metrics(run, "trainer")}  # the restarted trainer's rows come last
    for r in orch_rows[k:]:
        assert by_step[r["step"]]["loss_tokens"] == r["loss_tokens"]
    assert not list((run / "rollouts").rglob("*.bin"))
    assert all((run / f"weights/step_{n}/STABLE").is_file() for n in (4, 5))
