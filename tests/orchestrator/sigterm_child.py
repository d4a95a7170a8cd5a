"""Child process of test_shutdown.py: an orchestrator (fake slow inference, the nemo-gym taskset against the
resources server at argv[1], rows in argv[2]) run the way `orchestrator` runs it, until SIGTERM.

Run from the repository root: `python -m tests.orchestrator.sigterm_child URL ROWS OUT_DIR`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.orchestrator.fakes import DelayClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator import main as orch_main
from prime_rl.orchestrator.sources.nemo_gym import NemoGymSource


def main() -> int:
    url, rows, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    cfg = OrchestratorConfig(
        output_dir=out, batch_size=8, max_steps=2, seq_len=1024, max_async_level=0,
        train={"group_size": 4, "sampling": {"max_completion_tokens": 64},
               "source": [{"name": "remote", "env": {"taskset": {"dataset": rows, "task": {"resources_url": url}}}}]},
    )  # fmt: skip
    tok = tiny_tokenizer(Path(tempfile.mkdtemp()))
    src = NemoGymSource("remote", cfg.train.source[0].env.taskset)
    # the second turn waits an hour: every rollout is in flight (session seeded, tool called) when SIGTERM comes
    client = DelayClient(tok, lambda p, k: tool_call_text("add", {"x": 1}), lambda rid: 0.0)
    calls: dict[str, int] = {}

    async def slow(*a, **k):
        rid = k.get("rollout_id")
        calls[rid] = calls.get(rid, 0) + 1
        if calls[rid] > 1:
            print("in flight", flush=True)
            await asyncio.sleep(3600)
        return await DelayClient.generate(client, *a, **k)

    client.generate = slow
    orch = orch_main.Orchestrator(cfg, client=client, renderer=make_renderer(tok, cfg.renderer), train_sources=[src],
                                  poll_s=0.01, echo=False)  # fmt: skip

    async def run() -> None:
        try:
            await orch.run()
        finally:
            await src.aclose()

    runner = getattr(orch_main, "run_until_terminated", None)  # absent before the fix: plain asyncio.run
    if runner is None:
        asyncio.run(run())
        return 0
    return 143 if runner(run()) else 0


if __name__ == "__main__":
    sys.exit(main())
