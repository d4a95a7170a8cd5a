"""Child process of test_archive.py: an orchestrator (fake inference, the in-process counter environment, a fake
trainer publishing every step's weights) that runs until it is killed, archiving one gzip member per rollout.

Run from the repository root: `python -m tests.orchestrator.archive_kill_child OUT_DIR`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.orchestrator.fakes import CounterEnv, ScriptedClient, tiny_tokenizer
from tests.orchestrator.test_orchestrator_main import _script

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.transport.atomic import atomic_write_dir


async def trainer(run: Path) -> None:
    """Publish weights/step_N once rollouts/step_N/rank_0.bin exists, for N = 1, 2, ..."""
    n = 1
    while True:
        if (run / "rollouts" / f"step_{n}" / "rank_0.bin").exists():
            atomic_write_dir(run / "weights" / f"step_{n}", lambda d: (d / "model.safetensors").write_bytes(b"x"))
            n += 1
        await asyncio.sleep(0.005)


async def main(out: Path) -> None:
    cfg = OrchestratorConfig(
        output_dir=out, batch_size=16, max_steps=None, seq_len=1024, max_async_level=1, seed=3,
        train={"group_size": 4, "sampling": {"max_completion_tokens": 64}}, archive={"flush_rollouts": 1},
    )  # fmt: skip
    tok = tiny_tokenizer(Path(tempfile.mkdtemp()))
    orch = Orchestrator(cfg, client=ScriptedClient(tok, _script), renderer=make_renderer(tok, cfg.renderer),
                        train_sources=[InProcessSource("counter", CounterEnv(12))], poll_s=0.005, echo=False)  # fmt: skip
    t = asyncio.create_task(trainer(out))
    print("running", flush=True)
    await orch.run()
    t.cancel()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
