"""Does the agent loop's first-prompt cache pay? Rollouts per second of the orchestrator alone (GridSim in-process,
an instant in-process inference stub: `benchmarks/orchestrator.py`'s `InstantClient`) with the cache and without it
(`_PROMPT_CACHE_MAX = 0`: every rollout renders its task's first prompt), alternated in one run, with their ratio.
The cache is keyed by renderer, source, split and task id; a group's `group_size` rollouts share one
rendering.

Usage: python benchmarks/prompt_cache.py [--steps 4] [--batch-size 64] [--group-size 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from orchestrator import InstantClient, run_once  # noqa: E402
from prime_rl.models.renderer import make_renderer  # noqa: E402
from prime_rl.models.tokenizer import write_tokenizer  # noqa: E402
from prime_rl.orchestrator import agent  # noqa: E402


async def main_async(args) -> None:
    import tempfile

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as d:
        tok = AutoTokenizer.from_pretrained(str(write_tokenizer(Path(d) / "tok")))
    renderer = make_renderer(tok, "qwen3")
    default = agent._PROMPT_CACHE_MAX
    rates: dict[str, list[float]] = {"cache": [], "no cache": []}
    for _ in range(args.repeats):
        for tag, size in (("cache", default), ("no cache", 0)):
            agent._PROMPT_CACHE.clear()
            agent._PROMPT_CACHE_MAX = size
            r = await run_once(args, InstantClient(tok), renderer, async_level=1, train_s=0.0, tag=tag)
            rates[tag].append(r["rollouts_per_s"])
            print(f"{tag:>8}: {r['rollouts_per_s']:.1f} rollouts/s ({r['wall_s']:.1f} s)", flush=True)
    agent._PROMPT_CACHE_MAX = default
    on, off = (max(rates[k]) for k in ("cache", "no cache"))
    print(f"best of {args.repeats}: cache {on:.1f} rollouts/s, no cache {off:.1f} rollouts/s, ratio {on / off:.2f} "
          f"(group_size {args.group_size})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-inflight", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
