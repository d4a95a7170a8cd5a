"""The typed action, observation and state of prime-rl's OpenEnv environments (openenv-core's pydantic bases).

One episode is one task. `reset` answers the task (`task_id`, `split`, `index`, chat `messages`, function `tools`,
`info`: the fields of a `prime_rl.envs.base.Task`); each `call_tool` action answers the tool's text (`result`); the
`final` action (the model's last reply, no tool call) ends the episode, and its reward is the environment's verify
score. A `call_tool` action has the shape of OpenEnv's own MCP `CallToolAction` (`type`, `tool_name`, `arguments`).
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError


def _invalid(message: str) -> PydanticCustomError:
    """A validation error without the exception object in its context, so openenv-core's HTTP /step can answer it
    as JSON (422); a plain ValueError there becomes a 500."""
    return PydanticCustomError("task_action", message)


class TaskAction(Action):
    """One assistant turn: a tool call (`type="call_tool"`, `tool_name`, `arguments`) or the final reply
    (`type="final"`, `content`), which ends the episode.

    Raises (on validation):
        pydantic.ValidationError: a call_tool without `tool_name` or with `content`; a final with `tool_name` or `arguments`.
    """

    type: Literal["call_tool", "final"] = Field("call_tool", description="call_tool: run a tool; final: end the episode.")
    tool_name: str | None = Field(None, description="call_tool: the tool's name, as in the task's `tools`.")
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="call_tool: the arguments, a JSON object or the JSON text the model wrote."
    )
    content: str | None = Field(None, description="final: the model's last reply (what single-turn tasks score).")

    @model_validator(mode="after")
    def _one_kind(self) -> TaskAction:
        if self.type == "call_tool":
            if not self.tool_name:
                raise _invalid("a call_tool action needs `tool_name` (end the episode with type='final')")
            if self.content is not None:
                raise _invalid("`content` belongs to the final action (type='final'), not to a tool call")
        elif self.tool_name is not None or self.arguments:
            raise _invalid("a final action takes `content` only; send a tool call as type='call_tool'")
        return self


class TaskObservation(Observation):
    """What an episode answers. After `reset`: the task (every field but the tool ones). After a tool call:
    `tool_name` and its `result` text. At the end (`done`): the verify `reward` (None when `masked`: the episode could
    not be measured, `reason` says why), `metrics`. `error`: the action was not run (no episode, or it had ended)."""

    task_id: str = Field("", description="The task's id (unique within the environment).")
    split: str = Field("", description="The task's own split (train or eval), also in the `all` environment.")
    index: int = Field(0, description="The task's position in its own split.")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="reset: the chat messages (OpenAI form).")
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="reset: the function tools (Chat Completions form)."
    )
    info: dict[str, Any] = Field(default_factory=dict, description="reset: what rebuilds the episode (e.g. prices).")
    tool_name: str | None = Field(None, description="The tool this step called.")
    result: str | None = Field(None, description="The tool's answer (errors in the arguments included, as text).")
    error: str | None = Field(None, description="Why the action was not run.")
    metrics: dict[str, float] = Field(default_factory=dict, description="At the end: the verify metrics.")
    masked: bool = Field(False, description="At the end: the episode could not be measured (reward None).")
    reason: str | None = Field(None, description="Why the episode was masked.")


class TaskState(State):
    """The session's episode: OpenEnv's `episode_id` and `step_count`, plus the task and whether it ended."""

    task_id: str | None = Field(None, description="The task in play (None before the first reset).")
    split: str = Field("", description="The OpenEnv environment's split (all, eval).")
    done: bool = Field(False, description="The episode ended (a final action, or a masked crash).")
    reward: float | None = Field(None, description="The verify reward once done (None: not ended, or masked).")
