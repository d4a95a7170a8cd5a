"""The environment protocol shared by the orchestrator (in-process) and the NeMo Gym resources server (HTTP).

An environment owns its reward: the orchestrator only sees tasks, tool results and `VerifyResult`s.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prime_rl.registry import Registry


class EnvArgsError(ValueError):
    """An environment's `env.args` cannot work (an unknown dataset or game, a size below 1, a missing corpus): a
    user error, exit 2 with the message alone; the message names the `env.args` field and the fix."""


@dataclass
class Task:
    """One task: chat `messages` (OpenAI format) and `tools` (OpenAI function schemas) to start an episode."""

    task_id: str
    split: str
    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class VerifyResult:
    """The end of an episode. `masked` = the episode could not be measured (never train on it as 0)."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    masked: bool = False
    reason: str | None = None


DEFAULT_REWARD_RANGE: tuple[float, float] = (-1e6, 1e6)
"""The rewards accepted by default (`orchestrator.reward_range`): far above any real reward, far below where a
group's sums or the trainer's float32 overflow."""


def reward_problem(reward: Any, reward_range: tuple[float, float] | None = DEFAULT_REWARD_RANGE) -> str | None:
    """The one reward check of every environment path (in-process, NeMo Gym server and client, verifiers, OpenEnv).

    None when `reward` is a finite number (int or float, not bool) within `reward_range` (inclusive; None = no
    bound); else what is wrong with it, e.g. `reward nan`, `reward None (NoneType)`, `reward '1.0' (str)`,
    `reward 1e+308 outside [-1e+06, 1e+06]`. A reward that fails this masks its rollout (docs/design.md invariant
    7): it is never trained on, never counted as 0."""
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return f"reward {reward!r} ({type(reward).__name__})"
    if not math.isfinite(reward):
        return f"reward {reward!r}"
    if reward_range is not None and not reward_range[0] <= reward <= reward_range[1]:
        return f"reward {reward!r} outside [{reward_range[0]:g}, {reward_range[1]:g}]"
    return None


def finite_metrics(metrics: Any) -> dict[str, float]:
    """The entries of an episode's `metrics` that are finite numbers (int or float, not bool), as floats; the others
    are dropped, never the episode (metrics are averaged into the step's `env/<name>` numbers). Not a dict: {}."""
    if not isinstance(metrics, dict):
        return {}
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}  # fmt: skip


class Episode(ABC):
    """One run of one task. Not thread-safe; one episode per rollout."""

    task: Task

    @abstractmethod
    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Run tool `name` with JSON `arguments` (a dict, or a JSON string); return the result text.

        Bad arguments or an unknown tool return an error text for the model; this never raises for model mistakes.
        """

    def user_turn(self, reply: str) -> str | None:
        """The environment's answer to an assistant reply that called no tool: the next user message, or None to
        end the episode (the default: a reply without tool calls is the final answer). Text games and other
        user-turn environments return their next observation here; the agent loop appends it as a user turn."""
        return None

    @abstractmethod
    def verify(self, final_response: str | None = None) -> VerifyResult:
        """Score the episode; `final_response` is the model's last assistant text (single-turn environments)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; idempotent."""


class Environment(ABC):
    """A named set of tasks by split (`train`, `eval`) and a factory of episodes. `has_user_turns`: its episodes
    answer replies with user messages (`Episode.user_turn`), which only the in-process agent loop plays."""

    name: str
    has_user_turns: bool = False

    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """All tasks of `split`, in a fixed order. Raises KeyError for an unknown split."""

    @abstractmethod
    def episode(self, task: Task) -> Episode:
        """Start an episode of `task`."""

    def sft_examples(self, split: str = "train") -> list[dict[str, Any]]:
        """Demonstrations: chat conversations (`messages`, `tools`) that solve the tasks of `split`."""
        raise NotImplementedError(f"environment {self.name!r} has no demonstrations")


ENVS: Registry[Callable[..., Environment]] = Registry("environment", "env.id", {
    "gridsim": "prime_rl.envs.gridsim.env:GridSimEnv",
    "reverse-text": "prime_rl.envs.reverse_text.env:ReverseTextEnv",
    "digit-bandit": "prime_rl.envs.bandit.digit:DigitBanditEnv",
    "tool-bandit": "prime_rl.envs.bandit.safe:ToolBanditEnv",
    "reasoning-gym": "prime_rl.envs.reasoning_gym:ReasoningGymEnv",
    "textarena": "prime_rl.envs.textarena:TextArenaEnv",
})


def register_env(name: str, factory: str | Callable[..., Environment]) -> None:
    """Register a built-in environment by name: a callable or an import path `module:attr`."""
    ENVS.register(name, factory)


def list_envs() -> list[str]:
    return ENVS.names()


def load_env(name: str, **kwargs: Any) -> Environment:
    """Build a registered environment (or one given as `module:attr`) with its keyword arguments.

    Raises:
        RegistryError: unknown name (lists the known ones) or an import path that does not import.
    """
    return ENVS.get(name)(**kwargs)


def refuse_user_turns(env: Environment, served_as: str) -> None:
    """Refuse to serve an environment with user turns over a protocol that has none (NeMo Gym, OpenEnv): its
    episodes would end after the first reply.

    Raises:
        ValueError: `env.has_user_turns`; the message names the environment and how to run it instead.
    """
    if getattr(env, "has_user_turns", False):
        raise ValueError(
            f"environment {getattr(env, 'name', type(env).__name__)!r} answers replies with user turns, which "
            f"{served_as} cannot carry (its episodes would end after the first reply); play it in-process "
            "(env.id in an [[orchestrator.train.source]]) instead"
        )
