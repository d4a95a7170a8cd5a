"""Child process of test_workers.py: an orchestrator with 2 rollout workers whose second turns never answer, run the
way `orchestrator` runs it, until SIGTERM. Prints `in flight` once the workers are ready and rollouts run.

Run from the repository root: `python -m tests.orchestrator.workers_sigterm_child OUT_DIR`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.orchestrator.fakes import tiny_tokenizer
from tests.orchestrator.worker_stubs import KeyedClient, counter_source

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator import main as orch_main


def main() -> int:
    cfg = OrchestratorConfig(
        output_dir=Path(sys.argv[1]), batch_size=8, max_steps=2, seq_len=1024, max_async_level=0, eval={},
        train={"group_size": 4, "sampling": {"max_completion_tokens": 64}}, workers={"count": 2},
    )  # fmt: skip
    tok = tiny_tokenizer(Path(tempfile.mkdtemp()))
    orch = orch_main.Orchestrator(cfg, client=KeyedClient(tok), renderer=make_renderer(tok, cfg.renderer),
                                  train_sources=[counter_source()], poll_s=0.01, echo=False,
                                  worker_runtime="tests.orchestrator.worker_stubs:hanging_runtime")  # fmt: skip

    async def run() -> None:
        async def announce():
            while orch.sched is None or orch.sched.inflight < 8:
                await asyncio.sleep(0.05)
            print("in flight", flush=True)

        task = asyncio.create_task(announce())
        try:
            await orch.run()
        finally:
            task.cancel()

    return 143 if orch_main.run_until_terminated(run()) else 0


if __name__ == "__main__":
    sys.exit(main())
