"""The `trainer` command against an orchestrator's tcp rollout port that requires a token (`rollout_transport.token`):
with a wrong token the orchestrator answers with an error and the trainer stops with exit 2, one line naming the
field, and no traceback (the real ZMQ sender on this event loop, the trainer a subprocess)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from prime_rl.config.rollout_transport import RolloutTransportConfig
from prime_rl.ports import free_port
from prime_rl.transport.rollouts import build_sender


async def test_trainer_with_a_wrong_token_exits_2_naming_the_field(tiny_model_dir, tmp_path):
    port = free_port()
    sender = build_sender(RolloutTransportConfig(type="tcp", port=port, token="right"), tmp_path, num_ranks=1,
                          max_async_level=1, start_step=1, timeout_s=60)  # fmt: skip
    server = asyncio.create_task(sender.serve())
    cfg = tmp_path / "trainer.toml"
    cfg.write_text(f"""
output_dir = "{tmp_path / 'run'}"
max_steps = 1
seq_len = 64
threads = 1
data_timeout_s = 60
[model]
name = "{tiny_model_dir}"
[rollout_transport]
type = "tcp"
port = {port}
token = "wrong"
""")
    env = {k: v for k, v in os.environ.items() if k != "PRIME_RL_ROLLOUT_TOKEN"}
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "prime_rl.cli.trainer", "@", str(cfg),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    env=env, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        await sender.aclose()
    text = err.decode()
    assert proc.returncode == 2, (out + err).decode()[-3000:]
    assert "trainer: error:" in text and "missing or wrong rollout_transport.token" in text, text[-3000:]
    assert "Traceback" not in text
