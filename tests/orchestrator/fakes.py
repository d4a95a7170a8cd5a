"""Fakes for orchestrator tests: a scripted policy with the InferenceClient interface, small environments, a tokenizer."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult


def tiny_tokenizer(tmp_dir: Path):
    """The byte-level Qwen3-format tokenizer of `prime_rl.models.tokenizer`, loaded with transformers."""
    from transformers import AutoTokenizer

    from prime_rl.models.tokenizer import write_tokenizer

    return AutoTokenizer.from_pretrained(str(write_tokenizer(tmp_dir)))


@dataclass
class GenerateResult:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    policy_version: int


class ScriptedClient:
    """Fake `InferenceClient`: `script(prompt_text, call_index) -> completion text`; tokens from the tokenizer.

    Records every call (prompt ids, completion ids, logprobs) in `calls`. Logprobs are distinct, deterministic
    values (-(k+1)/1000 for the k-th sampled token overall) so a test can check they land on the right tokens.
    `version` is the policy version reported; `delay_s` is awaited per request.
    """

    def __init__(self, tokenizer, script, version: int = 0, delay_s: float = 0.0, stop_id: int | None = None):
        self.tok = tokenizer
        self.script = script
        self.version = version
        self.delay_s = delay_s
        self.stop_id = stop_id if stop_id is not None else tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls: list[dict[str, Any]] = []
        self.updates: list[tuple[str, int]] = []
        self._k = 0

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = self.script(self.tok.decode(prompt_ids), len(self.calls))
        ids = self.tok.encode(text, add_special_tokens=False) + [self.stop_id]
        finish = "stop"
        if max_tokens is not None and len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        lps = [-(self._k + i + 1) / 1000 for i in range(len(ids))]
        self._k += len(ids)
        self.calls.append({"prompt_ids": list(prompt_ids), "completion_ids": ids, "logprobs": lps, "rollout_id": rollout_id})
        return GenerateResult(list(prompt_ids), ids, lps, finish, self.version)

    async def update_weights(self, path: str, version: int) -> None:
        self.updates.append((path, version))
        self.version = version

    async def wait_healthy(self, timeout_s: float) -> None:
        return None

    def check_alive(self) -> None:
        return None

    async def context_length(self) -> int | None:
        return None

    async def aclose(self) -> None:
        return None


def tool_call_text(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class CounterEpisode(Episode):
    """Tool `add(x)` adds to a counter; reward = 1 if the final answer names the counter's value, else 0."""

    def __init__(self, task: Task, log: list, crash_on_verify: bool = False):
        self.task = task
        self.total = 0
        self.log = log
        self.crash_on_verify = crash_on_verify
        self.closed = False

    def call_tool(self, name, arguments):
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        if name != "add":
            return f"unknown tool {name!r}"
        self.total += int(args.get("x", 0))
        return f"total={self.total}"

    def verify(self, final_response=None):
        if self.crash_on_verify:
            raise RuntimeError("verifier crashed")
        return VerifyResult(reward=float(final_response is not None and str(self.total) in final_response))

    def close(self):
        self.closed = True
        self.log.append(("close", self.task.task_id))


ADD_TOOL = {
    "type": "function",
    "function": {"name": "add", "description": "Add x.", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
}


class CounterEnv(Environment):
    """`n` tasks per split; task i asks to add up to i."""

    name = "counter"

    def __init__(self, n: int = 16, crash_on_verify: bool = False, reward_fn=None):
        self.n = n
        self.log: list = []
        self.crash_on_verify = crash_on_verify
        self.episodes: list[CounterEpisode] = []

    def tasks(self, split):
        if split not in ("train", "eval"):
            raise KeyError(split)
        return [
            Task(f"counter-{split}-{i}", split, i, [{"role": "system", "content": "Count."}, {"role": "user", "content": f"Reach {i}."}], [ADD_TOOL])
            for i in range(self.n)
        ]

    def episode(self, task):
        ep = CounterEpisode(task, self.log, self.crash_on_verify)
        self.episodes.append(ep)
        return ep


def stable_reward(key: str) -> float:
    """A deterministic pseudo-reward in [0, 1) from a string."""
    h = 0
    for ch in key:
        h = (h * 131 + ord(ch)) % 1_000_003
    return (math.sin(h) + 1) / 2 * 0.999


class EchoEpisode(Episode):
    """No tools; reward = the digit at the end of the final answer / 3 (answers look like `r2`)."""

    def __init__(self, task: Task, log: list):
        self.task, self.log = task, log

    def call_tool(self, name, arguments):
        return "no tools here"

    def verify(self, final_response=None):
        d = (final_response or "r0")[-1]
        return VerifyResult(reward=int(d) / 3 if d.isdigit() else 0.0)

    def close(self):
        self.log.append(("close", self.task.task_id))


class EchoEnv(Environment):
    name = "echo"

    def __init__(self, n: int = 32):
        self.n = n
        self.log: list = []

    def tasks(self, split):
        return [Task(f"echo-{split}-{i}", split, i, [{"role": "user", "content": f"Say r and a digit ({i})."}]) for i in range(self.n)]

    def episode(self, task):
        self.log.append(("open", task.task_id))
        return EchoEpisode(task, self.log)


class DelayClient(ScriptedClient):
    """ScriptedClient whose per-request delay is `delay_fn(rollout_id)` seconds."""

    def __init__(self, tokenizer, script, delay_fn, **kw):
        super().__init__(tokenizer, script, **kw)
        self.delay_fn = delay_fn

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None):
        await asyncio.sleep(self.delay_fn(rollout_id))
        return await super().generate(prompt_ids, sampling, rollout_id=rollout_id, stop_token_ids=stop_token_ids, max_tokens=max_tokens)
