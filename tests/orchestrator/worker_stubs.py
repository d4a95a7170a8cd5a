"""Worker runtimes for tests of the rollout workers (`orchestrator.workers`), importable in a spawned worker: the
counter environment and a client whose answers and logprobs depend only on the rollout id and the prompt, so a
rollout's tokens are the same in whichever process plays it."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from tests.orchestrator.fakes import CounterEnv, GenerateResult, tiny_tokenizer, tool_call_text

from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.worker_main import WorkerRuntime

NUM_TASKS = 12


class KeyedClient:
    """Fake inference client: a tool call adding the task's target on the first turn, then an answer that is wrong
    for members 0, 3, 6, ... of a group (mixed rewards); logprobs -(h + i + 1) / 1000 for token i, with h from a
    hash of (rollout id, prompt length). `version` is the policy version it reports (`update_weights` sets it).
    `die_on_generate`: `os._exit` with this code on the first request (a crash)."""

    def __init__(self, tok, die_on_generate: int | None = None):
        self.tok, self.version, self.die_on_generate = tok, 0, die_on_generate
        self.stop_id = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        if self.die_on_generate is not None:
            os._exit(self.die_on_generate)
        prompt = self.tok.decode(prompt_ids)
        member = int(rollout_id.rsplit("/r", 1)[1])
        if "<tool_response>" not in prompt:
            text = tool_call_text("add", {"x": int(re.findall(r"Reach (\d+)\.", prompt)[-1])})
        else:
            text = "done 9999" if member % 3 == 0 else "done " + re.findall(r"total=(\d+)", prompt)[-1]
        ids = self.tok.encode(text, add_special_tokens=False) + [self.stop_id]
        key = hashlib.blake2b(f"{rollout_id}/{len(prompt_ids)}".encode(), digest_size=2).digest()
        base = int.from_bytes(key, "little") % 997
        return GenerateResult(list(prompt_ids), ids, [-(base + i + 1) / 1000 for i in range(len(ids))], "stop",
                              self.version)  # fmt: skip

    async def update_weights(self, path, version):
        self.version = version

    async def wait_healthy(self, timeout_s=None):
        return None

    def check_alive(self):
        return None

    async def context_length(self):
        return None

    async def aclose(self):
        return None


def counter_source() -> InProcessSource:
    return InProcessSource("counter", CounterEnv(NUM_TASKS))


async def counter_runtime(cfg, index: int) -> WorkerRuntime:
    """The counter environment and a `KeyedClient` that reports the policy version of each job."""
    tok = tiny_tokenizer(Path(tempfile.mkdtemp(prefix=f"worker{index}-tok-")))
    client = KeyedClient(tok)
    return WorkerRuntime(client, make_renderer(tok, cfg.renderer), [counter_source()],
                         on_policy_version=lambda v: setattr(client, "version", v))  # fmt: skip


async def dying_runtime(cfg, index: int) -> WorkerRuntime:
    """As `counter_runtime`, but worker 1's client exits the process with code 3 on its first request."""
    runtime = await counter_runtime(cfg, index)
    if index == 1:
        runtime.client.die_on_generate = 3
    return runtime


async def failing_runtime(cfg, index: int) -> WorkerRuntime:
    """A worker that cannot start."""
    raise ConnectionError(f"worker {index}: the environment server refused the connection")


async def other_tasks_runtime(cfg, index: int) -> WorkerRuntime:
    """A worker whose source lists other tasks than the orchestrator's (a non-deterministic task list)."""
    runtime = await counter_runtime(cfg, index)
    runtime.sources[0].tasks = lambda split: list(reversed(CounterEnv(NUM_TASKS).tasks(split)))
    return runtime


async def hanging_runtime(cfg, index: int) -> WorkerRuntime:
    """As `counter_runtime`, but every second turn waits an hour (the rollouts stay in flight); each closed episode
    is written to `closed-w<index>.txt` in the run directory, one task id a line."""
    import asyncio

    runtime = await counter_runtime(cfg, index)
    client, answer = runtime.client, runtime.client.generate
    source = runtime.sources[0]

    async def slow(prompt_ids, sampling, **kw):
        if "<tool_response>" in client.tok.decode(prompt_ids):
            await asyncio.sleep(3600)
        return await answer(prompt_ids, sampling, **kw)

    client.generate = slow
    log = Path(cfg.output_dir) / f"closed-w{index}.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    episode = source.env.episode

    def tracked(task):
        opened = episode(task)
        close = opened.close

        def closing():
            close()
            with log.open("a") as f:
                f.write(task.task_id + "\n")

        opened.close = closing
        return opened

    source.env.episode = tracked
    return runtime
