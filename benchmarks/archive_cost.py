"""The rollout archive's cost in the orchestrator process: records/s of the archive writer, the standard library's
`json` with gzip level 6 against `prime_rl.orchestrator.archive` (orjson, gzip `COMPRESSLEVEL`), side by side in
one run.

Each repeat builds `--rollouts` GridSim-like rollouts (a system prompt of `--prompt-chars` characters, a user turn,
an assistant turn with a tool call, the tool's result, a final assistant turn; `--samples` samples of `--tokens`
token ids, log-uniform in [1, 50000) as a Zipf-like stand-in for text, with their loss mask) and times, for each
writer in turn (alternating, `--repeats` times): building the records (`rollout_record`, the same for every
writer), encoding them as JSON lines, and gzip-compressing them in members of `flush_rollouts` records (no file
I/O: the fsync per member is the same for all). Printed per writer: the median records/s of encode + compress and
of the whole write (build + encode + compress), the bytes per record compressed, and the ratio of the current
writer to the stdlib one (orjson with gzip 6 is printed too: the encoder's share). Every writer's output is decoded
with `prime_rl.monitor.archive.read_records` and checked equal.

Usage: python benchmarks/archive_cost.py [--rollouts 2048] [--repeats 5] [--tokens 1500] [--samples 1]
       [--prompt-chars 3000] [--logprobs]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from prime_rl.config.archive import ArchiveConfig  # noqa: E402
from prime_rl.envs.base import Task  # noqa: E402
from prime_rl.monitor.archive import read_records  # noqa: E402
from prime_rl.orchestrator.archive import COMPRESSLEVEL, json_lines, rollout_record  # noqa: E402
from prime_rl.orchestrator.types import Rollout, Sample  # noqa: E402


def make_rollouts(n: int, *, tokens: int, samples: int, prompt_chars: int, seed: int = 0) -> list[Rollout]:
    """`n` rollouts shaped like GridSim's (see the module docstring); deterministic in `seed`."""
    rng = random.Random(seed)
    words = ["load", "price", "MW", "hour", "zone", "HOUSTON", "NORTH", "forecast", "solar", "wind", "reserve"]

    def text(chars: int) -> str:
        out: list[str] = []
        while sum(len(w) + 1 for w in out) < chars:
            out.append(rng.choice(words) if rng.random() < 0.6 else f"{rng.uniform(0, 9999):.2f}")
        return " ".join(out)

    rollouts = []
    for i in range(n):
        task = Task(
            task_id=f"gridsim-{i // 8}",
            split="train",
            index=i // 8,
            messages=[{"role": "system", "content": text(prompt_chars)}, {"role": "user", "content": text(300)}],
            tools=[{"type": "function", "function": {"name": "query", "parameters": {"type": "object"}}}],
        )
        call = {"id": "call_0", "type": "function", "function": {"name": "query", "arguments": {"hour": 17}}}
        messages = [
            *task.messages,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "name": "query", "content": text(800)},
            {"role": "assistant", "content": text(120)},
        ]
        sample_list = [
            Sample(
                [int(50_000 ** rng.random()) for _ in range(tokens)],
                [k >= tokens // 2 for k in range(tokens)],
                [-rng.random() if k >= tokens // 2 else 0.0 for k in range(tokens)],
            )
            for _ in range(samples)
        ]
        rollouts.append(Rollout(task=task, source="gridsim", group_id=i // 8, samples=sample_list, messages=messages,
                                reward=rng.random(), env_metrics={"mae": rng.random()}, rollout_id=f"r{i}",
                                num_turns=2, policy_versions=[3, 3], advantage=rng.uniform(-1, 1),
                                duration_s=rng.random()))  # fmt: skip
    return rollouts


def stdlib_level6(records: list[dict], per_member: int) -> bytes:
    """The writer before orjson: stdlib `json` (ensure_ascii off) and gzip level 6, one member per `per_member`."""
    out = []
    for i in range(0, len(records), per_member):
        text = "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in records[i : i + per_member])
        out.append(gzip.compress(text.encode(), compresslevel=6, mtime=0))
    return b"".join(out)


def orjson_level6(records: list[dict], per_member: int) -> bytes:
    """orjson's lines (`json_lines`) with gzip level 6: the encoder's share of the change alone."""
    return b"".join(gzip.compress(json_lines(records[i : i + per_member]), compresslevel=6, mtime=0)
                    for i in range(0, len(records), per_member))  # fmt: skip


def current(records: list[dict], per_member: int) -> bytes:
    """`prime_rl.orchestrator.archive`'s members (as `append_members` writes them, without the file)."""
    return b"".join(gzip.compress(json_lines(records[i : i + per_member]), compresslevel=COMPRESSLEVEL, mtime=0)
                    for i in range(0, len(records), per_member))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=1500, help="token ids per sample")
    ap.add_argument("--samples", type=int, default=1, help="samples per rollout")
    ap.add_argument("--prompt-chars", type=int, default=3000)
    ap.add_argument("--logprobs", action="store_true", help="archive.logprobs = true (a logprob per token)")
    args = ap.parse_args()
    per_member = ArchiveConfig().flush_rollouts
    rollouts = make_rollouts(args.rollouts, tokens=args.tokens, samples=args.samples, prompt_chars=args.prompt_chars)
    writers = {"stdlib json + gzip 6": stdlib_level6, "orjson + gzip 6": orjson_level6,
               f"orjson + gzip {COMPRESSLEVEL}": current}  # fmt: skip
    build_s: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in writers}
    sizes: dict[str, int] = {}
    outputs: dict[str, bytes] = {}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        records = [rollout_record(r, 1, "train", logprobs=args.logprobs) for r in rollouts]
        build_s.append(time.perf_counter() - t0)
        for name, write in writers.items():
            t0 = time.perf_counter()
            data = write(records, per_member)
            times[name].append(time.perf_counter() - t0)
            sizes[name], outputs[name] = len(data), data
    with tempfile.TemporaryDirectory() as tmp:
        decoded = []
        for data in outputs.values():
            path = Path(tmp) / f"{len(decoded)}.jsonl.gz"
            path.write_bytes(data)
            decoded.append(read_records(path))
    assert all(d == decoded[0] for d in decoded), "the writers' records differ"
    n = args.rollouts
    build = statistics.median(build_s)
    print(f"{n} records x {args.repeats} repeats, {args.samples} samples x {args.tokens} tokens, "
          f"prompt {args.prompt_chars} chars, logprobs {args.logprobs}, {per_member} records per member")  # fmt: skip
    print(f"build records (rollout_record, both): {n / build:,.0f} records/s")
    rates = {}
    for name in writers:
        enc = statistics.median(times[name])
        rates[name] = (n / enc, n / (build + enc))
        print(f"{name:>22}: encode + compress {rates[name][0]:,.0f} records/s "
              f"[{', '.join(f'{n / t:,.0f}' for t in times[name])}], whole write {rates[name][1]:,.0f} records/s, "
              f"{sizes[name] / n:,.0f} bytes/record")  # fmt: skip
    (old_name, old), (new_name, new) = next(iter(rates.items())), list(rates.items())[-1]
    old_size, new_size = sizes[old_name], sizes[new_name]
    print(f"ratio {new_name} / {old_name}: encode + compress x{new[0] / old[0]:.2f}, whole write "
          f"x{new[1] / old[1]:.2f}, size x{new_size / old_size:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
