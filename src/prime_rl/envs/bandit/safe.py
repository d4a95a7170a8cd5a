"""tool-bandit: a safe with a one-digit code. Two turns: call the tool `open_safe` with a code, then answer with
the word the safe replied ("open" or "locked").

    reward = 1.0 if the last call used the right code and the final answer is "open"
             0.0 otherwise (wrong code, no call, or a final answer other than what the safe said)

Every task has the same code (`code`), so the best policy is known: call `open_safe(code)` and answer "open". The
demonstrations (`sft_examples`) call the tool with a uniformly random digit and answer with the safe's reply, so a
model warm-started on them knows the tool-call format and copies the reply, but opens the safe one time in ten:
RL alone must learn the code.
"""

from __future__ import annotations

import json
import random
from typing import Any

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult

SPLITS = ("train", "eval")
TOOL_NAME = "open_safe"
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Try a one-digit code on the safe; replies open or locked.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "integer", "description": "a digit 0-9"}},
            "required": ["code"],
        },
    },
}
SYSTEM = "Open the safe: call open_safe with a code, then reply with the safe's answer."


class SafeEpisode(Episode):
    def __init__(self, task: Task, code: int):
        self.task, self.code = task, code
        self.calls = 0
        self.opened = False

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        if name != TOOL_NAME:
            return f"error: unknown tool {name!r}; the only tool is {TOOL_NAME}"
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return "error: arguments are not JSON"
        code = arguments.get("code") if isinstance(arguments, dict) else None
        self.calls += 1
        if not isinstance(code, int) or isinstance(code, bool):
            self.opened = False
            return "error: code must be an integer"
        self.opened = code == self.code
        return "open" if self.opened else "locked"

    def verify(self, final_response: str | None = None) -> VerifyResult:
        answer = (final_response or "").strip().lower()
        reward = float(self.opened and answer == "open")
        return VerifyResult(reward, {"opened": float(self.opened), "calls": float(self.calls)})


class ToolBanditEnv(Environment):
    """`num_train` / `num_eval` tasks (numbered prompts) of one safe.

    Args:
        code: the digit that opens the safe. num_train, num_eval: tasks per split. seed: seed of the demonstrations'
            random codes and of the train/eval split of safe numbers.

    Raises:
        ValueError: code outside 0-9.
    """

    name = "tool-bandit"

    def __init__(self, code: int = 7, num_train: int = 256, num_eval: int = 32, seed: int = 0):
        if not 0 <= int(code) <= 9:
            raise ValueError(f"code = {code}: must be a digit 0-9")
        self.code, self.seed = int(code), seed
        self.n = {"train": num_train, "eval": num_eval}

    def safe_numbers(self, split: str) -> list[int]:
        """The safe numbers of `split`'s prompts ("Safe 123."): one seeded shuffle of 0..num_train+num_eval-1, the
        first num_train for train and the rest for eval, so the eval prompts are a held-out sample of the train
        prompts' distribution. (Numbering eval safes 0..num_eval-1 made a third of them one-digit numbers, which
        are 4% of train prompts: a policy that opened 80% of train safes opened none of the one-digit ones.)"""
        numbers = list(range(self.n["train"] + self.n["eval"]))
        random.Random(f"tool-bandit-split-{self.seed}").shuffle(numbers)
        return numbers[: self.n["train"]] if split == "train" else numbers[self.n["train"] :]

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise KeyError(f"unknown split {split!r}; tool-bandit has {', '.join(SPLITS)}")
        return [
            Task(
                f"safe-{split}-{i}", split, i,
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Safe {n}."}],
                tools=[TOOL_SCHEMA], info={"env": self.name},
            )  # fmt: skip
            for i, n in enumerate(self.safe_numbers(split))
        ]

    def episode(self, task: Task) -> SafeEpisode:
        return SafeEpisode(task, self.code)

    def sft_examples(self, split: str = "train") -> list[dict[str, Any]]:
        """Format demonstrations, not solutions: a uniformly random code (seeded), the safe's reply, that reply."""
        rng = random.Random(self.seed)
        out = []
        for task in self.tasks(split):
            code = rng.randrange(10)
            reply = "open" if code == self.code else "locked"
            call = {"id": "call_0", "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": json.dumps({"code": code})}}  # fmt: skip
            msgs = [
                *task.messages,
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_0", "name": TOOL_NAME, "content": reply},
                {"role": "assistant", "content": reply},
            ]
            out.append({"messages": msgs, "tools": task.tools, "task_id": task.task_id, "split": split})
        return out
