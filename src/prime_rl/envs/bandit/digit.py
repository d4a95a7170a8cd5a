"""digit-bandit: one turn, no tools. "Answer with one digit."; the reward is fixed by the answer's first character:

    1.0 if it is the target digit, `digit_credit` if it is another digit, 0.0 otherwise (or no answer)

(first character after stripping whitespace). The best policy answers the target digit (reward 1). A randomly
initialised byte-level model starts a reply with a digit about 10 times in 265, so groups of a few dozen rollouts
see digits from the first step, and RL must first prefer digits, then the target among them.
"""

from __future__ import annotations

from typing import Any

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult

SPLITS = ("train", "eval")
PROMPT = "Answer with one digit."


def digit_reward(answer: str | None, target: int, digit_credit: float) -> float:
    """Reward of `answer`'s first non-space character: 1.0 = `target`, `digit_credit` = another digit, else 0.0."""
    text = (answer or "").strip()
    if not text:
        return 0.0
    first_char = text[0]
    if first_char == str(target):
        return 1.0
    return digit_credit if first_char.isascii() and first_char.isdigit() else 0.0


class DigitEpisode(Episode):
    def __init__(self, task: Task, target: int, digit_credit: float):
        self.task, self.target, self.digit_credit = task, target, digit_credit

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        return f"error: digit-bandit has no tools (called {name!r}); answer with one digit"

    def verify(self, final_response: str | None = None) -> VerifyResult:
        reward = digit_reward(final_response, self.target, self.digit_credit)
        return VerifyResult(reward, {"target": float(reward == 1.0), "digit": float(reward > 0.0)})


class DigitBanditEnv(Environment):
    """`num_train` / `num_eval` identical-looking tasks (numbered prompts) with one target digit.

    Args:
        target: the rewarded digit (0-9). digit_credit: reward of any other digit, in [0, 1).
        num_train, num_eval: tasks per split.

    Raises:
        ValueError: target outside 0-9 or digit_credit outside [0, 1).
    """

    name = "digit-bandit"

    def __init__(self, target: int = 7, digit_credit: float = 0.25, num_train: int = 64, num_eval: int = 16):
        if not 0 <= int(target) <= 9:
            raise ValueError(f"target = {target}: must be a digit 0-9")
        if not 0.0 <= digit_credit < 1.0:
            raise ValueError(f"digit_credit = {digit_credit}: must be in [0, 1)")
        self.target, self.digit_credit = int(target), float(digit_credit)
        self.n = {"train": num_train, "eval": num_eval}

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise KeyError(f"unknown split {split!r}; digit-bandit has {', '.join(SPLITS)}")
        return [
            Task(f"digit-{split}-{i}", split, i, [{"role": "user", "content": f"{PROMPT} ({i})"}], info={"env": self.name})
            for i in range(self.n[split])
        ]

    def episode(self, task: Task) -> DigitEpisode:
        return DigitEpisode(task, self.target, self.digit_credit)

    def sft_examples(self, split: str = "train") -> list[dict[str, Any]]:
        """The optimal answer (the target digit) for each task."""
        return [
            {"messages": [*t.messages, {"role": "assistant", "content": str(self.target)}], "tools": [],
             "task_id": t.task_id, "split": split}  # fmt: skip
            for t in self.tasks(split)
        ]
