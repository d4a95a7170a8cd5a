"""reasoning-gym: procedurally generated reasoning tasks with exact verifiers, as a built-in environment.

`env.id = "reasoning-gym"` with `env.args` naming one or more of the package's datasets (`reasoning_gym.factory.
DATASETS`: chain_sum, leg_counting, spell_backward, ...) and their weights. Tasks are drawn by reasoning-gym's own
`CompositeDataset` (a weighted mix; each dataset's generator seeded from the split's seed), so a task is exactly the
package's item: the prompt is its `question`, the reward its dataset's own `score_answer(answer, entry)`.

Splits: `train` and `eval` come from two different seeds (`seed` and `seed + EVAL_SEED_OFFSET`), and any train item
whose question also occurs in the eval split is dropped, so no eval question is trained on.

Answer formats (`answer_format`):
- `tag` (default): the model ends with `<answer>...</answer>`; the last such tag is scored (reasoning-gym's own
  `extract_answer`); no tag scores the answer `None` (reward 0 for every dataset the package ships).
- `plain`: the whole final reply (without a leading `<think>` block) is the answer.
- `tool`: the model calls the `submit_answer` tool with `{"answer": "..."}`; the last submitted answer is scored, so
  the task becomes a (short) tool-calling episode.

Rewards (`reward`):
- `score` (default): the dataset's `score_answer` as is, partial credit included (e.g. some datasets give 0.5 for
  an answer with the wrong sign, or a fraction for a near-miss string).
- `exact`: 1.0 when `score_answer` gives 1.0, else 0.0, so a policy cannot climb by collecting partial credit.
Either way the rollout's metrics carry `score` (the package's value) and `exact`.

Requires the `reasoning-gym` extra (`pip install 'prime-rl[reasoning-gym]'`); the package needs no network at run time.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from prime_rl.envs.base import EnvArgsError, Environment, Episode, Task, VerifyResult
from prime_rl.envs.reverse_text.env import extract_answer as strip_think
from prime_rl.extras import require

SPLITS = ("train", "eval")
ANSWER_FORMATS = ("tag", "plain", "tool")
REWARDS = ("score", "exact")
EVAL_SEED_OFFSET = 1_000_003  # eval seed = seed + this; composite sub-datasets use seed + 1 .. seed + n

SYSTEM_PROMPTS = {
    "tag": "Answer the question. Think briefly if you need to, then give only the final answer between <answer> "
    "and </answer> tags, e.g. <answer>42</answer>. When an example is provided, follow the format of its answer.",
    "plain": "Answer the question. Reply with the final answer only, with no explanation. When an example is "
    "provided, follow the format of its answer.",
    "tool": "Answer the question. When you know the answer, call the submit_answer tool with the final answer only. "
    "When an example is provided, follow the format of its answer.",
}

SUBMIT_TOOL = {
    "type": "function",
    "function": {
        "name": "submit_answer",
        "description": "Submit the final answer to the question (only the answer, no explanation).",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
        },
    },
}


def _rg() -> Any:
    return require("reasoning_gym", "reasoning-gym", "the reasoning-gym environment")


def dataset_specs(datasets: str | list[str] | dict[str, float], config: dict[str, dict[str, Any]]) -> list[Any]:
    """reasoning-gym `DatasetSpec`s from the env's `datasets` (a name, a list of names with weight 1 each, or
    name -> weight) and `config` (name -> the dataset's own keyword arguments, e.g. `{"chain_sum": {"min_terms": 2}}`).

    Raises:
        EnvArgsError: an empty selection, an unknown dataset name (lists the known ones), a weight that is not > 0, or a
            `config` entry for a dataset that is not selected.
    """
    from reasoning_gym.composite import DatasetSpec

    known = _rg().factory.DATASETS
    if isinstance(datasets, str):
        datasets = {datasets: 1.0}
    elif isinstance(datasets, list):
        datasets = {name: 1.0 for name in datasets}
    if not datasets:
        raise EnvArgsError("env.args.datasets: no reasoning-gym dataset selected; name one, e.g. datasets = "
                         '["chain_sum"]')  # fmt: skip
    unknown = sorted(set(datasets) - set(known))
    if unknown:
        raise EnvArgsError(f"env.args.datasets: unknown reasoning-gym dataset(s) {unknown}; choose from: "
                         f"{', '.join(sorted(known))}")  # fmt: skip
    stray = sorted(set(config) - set(datasets))
    if stray:
        raise EnvArgsError(f"env.args.config names {stray}, which are not in env.args.datasets {sorted(datasets)}")
    specs = []
    for name, weight in datasets.items():
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
            raise EnvArgsError(f"env.args.datasets.{name} = {weight!r}: a weight must be a number > 0")
        cfg = dict(config.get(name, {}))
        for key in ("seed", "size"):
            if key in cfg:
                raise EnvArgsError(f"env.args.config.{name}.{key}: set by the environment (use env.args.seed / "
                                 "num_train / num_eval)")  # fmt: skip
        specs.append(DatasetSpec(name=name, weight=float(weight), config=cfg))
    return specs


class ReasoningGymEpisode(Episode):
    """One reasoning-gym item; `score` is the dataset's `score_answer` (a bound method of the split's composite)."""

    def __init__(self, task: Task, entry: dict[str, Any], score: Any, answer_format: str, reward: str = "score"):
        self.task, self.entry, self.score, self.answer_format = task, entry, score, answer_format
        self.reward = reward
        self.submitted: str | None = None
        self.submissions = 0

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        if self.answer_format != "tool" or name != "submit_answer":
            return f"error: unknown tool {name!r}" + ("; call submit_answer" if self.answer_format == "tool" else
                                                       "; this task has no tools, reply with the answer")  # fmt: skip
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return 'error: arguments must be a JSON object {"answer": "..."}'
        answer = arguments.get("answer") if isinstance(arguments, dict) else None
        if answer is None:
            return 'error: missing "answer"; call submit_answer with {"answer": "..."}'
        self.submitted = str(answer)
        self.submissions += 1
        return "Answer recorded."

    def answer(self, final_response: str | None) -> str | None:
        """The answer to score under this episode's format (None when the model gave none)."""
        if self.answer_format == "tool":
            return self.submitted
        if final_response is None:
            return None
        if self.answer_format == "plain":
            return strip_think(final_response)
        from reasoning_gym.utils import extract_answer

        return extract_answer(final_response)

    def verify(self, final_response: str | None = None) -> VerifyResult:
        answer = self.answer(final_response)
        score = float(self.score(answer, self.entry))
        exact = float(score == 1.0)
        return VerifyResult(exact if self.reward == "exact" else score,
                            {"answered": float(answer is not None), "exact": exact, "score": score})  # fmt: skip


class ReasoningGymEnv(Environment):
    """reasoning-gym tasks (see the module docstring).

    Args:
        datasets: a dataset name, a list of names (equal weights) or name -> weight.
        config: name -> that dataset's own keyword arguments (its difficulty settings), e.g. `{"chain_sum":
            {"min_terms": 2, "max_terms": 3}}`.
        seed: seed of the train split (eval: `seed + EVAL_SEED_OFFSET`).
        num_train, num_eval: items generated per split (train may lose items shared with eval).
        answer_format: `tag`, `plain` or `tool`.
        system_prompt: replaces the format's default system prompt.
        reward: `score` (the package's `score_answer`, partial credit included) or `exact` (1 for a full score,
            else 0).

    Raises:
        EnvArgsError: unknown datasets, format or reward, sizes below 1; a dataset setting the package refuses or
            fails on (when the tasks are first built: the package's error is named).
        MissingExtraError: reasoning-gym is not installed.
    """

    name = "reasoning-gym"

    def __init__(self, datasets: str | list[str] | dict[str, float] = "chain_sum",
                 config: dict[str, dict[str, Any]] | None = None, seed: int = 0, num_train: int = 1000,
                 num_eval: int = 100, answer_format: str = "tag", system_prompt: str | None = None,
                 reward: str = "score"):  # fmt: skip
        if answer_format not in ANSWER_FORMATS:
            raise EnvArgsError(f"env.args.answer_format = {answer_format!r}: choose one of {', '.join(ANSWER_FORMATS)}")
        if reward not in REWARDS:
            raise EnvArgsError(f"env.args.reward = {reward!r}: choose one of {', '.join(REWARDS)}")
        self.reward = reward
        if num_train < 1 or num_eval < 1:
            raise EnvArgsError(f"env.args.num_train = {num_train}, num_eval = {num_eval}: each must be >= 1")
        self.datasets, self.config = datasets, dict(config or {})
        self.seed, self.num_train, self.num_eval = seed, num_train, num_eval
        self.answer_format = answer_format
        self.system_prompt = system_prompt or SYSTEM_PROMPTS[answer_format]

    def _composite(self, seed: int, size: int) -> Any:
        from reasoning_gym.composite import CompositeConfig, CompositeDataset

        return CompositeDataset(CompositeConfig(size=size, seed=seed, datasets=dataset_specs(self.datasets,
                                                                                             self.config)))  # fmt: skip

    @cached_property
    def _splits(self) -> dict[str, tuple[Any, list[dict[str, Any]]]]:
        try:
            ev = self._composite(self.seed + EVAL_SEED_OFFSET, self.num_eval)
            tr = self._composite(self.seed, self.num_train)
            eval_items = [ev[i] for i in range(len(ev))]
            eval_questions = {e["question"] for e in eval_items}
            train_items = [e for e in (tr[i] for i in range(len(tr))) if e["question"] not in eval_questions]
        except EnvArgsError:
            raise
        except Exception as e:  # noqa: BLE001 - the package's own check or crash on a setting, named below
            raise EnvArgsError(
                f"env.args: reasoning-gym could not build or draw the items of datasets {self.datasets!r} with "
                f"config {self.config!r}: {type(e).__name__}: {e}. Check each env.args.config.<dataset> setting "
                "against the dataset's own config class; a setting the package takes as a Python object (e.g. aiw's "
                "task_types, an enum) cannot be written in a config: leave it at its default"
            ) from e
        return {"train": (tr, train_items), "eval": (ev, eval_items)}

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise KeyError(f"unknown split {split!r}; reasoning-gym has {', '.join(SPLITS)}")
        tools = [SUBMIT_TOOL] if self.answer_format == "tool" else []
        return [
            Task(
                task_id=f"reasoning-gym-{split}-{i}",
                split=split,
                index=i,
                messages=[{"role": "system", "content": self.system_prompt},
                          {"role": "user", "content": entry["question"]}],  # fmt: skip
                tools=tools,
                info={"env": self.name, "dataset": entry["metadata"]["source_dataset"], "answer": entry["answer"]},
            )
            for i, entry in enumerate(self._splits[split][1])
        ]

    def episode(self, task: Task) -> ReasoningGymEpisode:
        """Raises KeyError for a task that is not one of this environment's (unknown split or index)."""
        if task.split not in SPLITS:
            raise KeyError(f"task {task.task_id!r}: unknown split {task.split!r}")
        composite, items = self._splits[task.split]
        if not 0 <= task.index < len(items):
            raise KeyError(f"task {task.task_id!r}: index {task.index} outside the {task.split} split ({len(items)})")
        return ReasoningGymEpisode(task, items[task.index], composite.score_answer, self.answer_format, self.reward)

    def sft_examples(self, split: str = "train") -> list[dict[str, Any]]:
        """The dataset's reference answers in this environment's answer format."""
        out = []
        for task in self.tasks(split):
            answer = str(task.info["answer"])
            if self.answer_format == "tool":
                call = {"id": "call_0_0", "type": "function",
                        "function": {"name": "submit_answer", "arguments": {"answer": answer}}}  # fmt: skip
                turns = [{"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "name": "submit_answer", "tool_call_id": "call_0_0",
                          "content": "Answer recorded."},
                         {"role": "assistant", "content": "Submitted."}]  # fmt: skip
            else:
                content = f"<answer>{answer}</answer>" if self.answer_format == "tag" else answer
                turns = [{"role": "assistant", "content": content}]
            out.append({"messages": [*task.messages, *turns], "tools": task.tools, "task_id": task.task_id,
                        "split": split})  # fmt: skip
        return out
