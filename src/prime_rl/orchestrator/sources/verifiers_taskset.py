"""Any installed verifiers v1 taskset as a task source (`env.taskset.id` other than `nemo-gym`).

    [[orchestrator.train.source]]
    name = "wordle"
    env.taskset.id = "my-taskset"            # resolved by verifiers: verifiers.v1.tasksets.<id> or package <id>
    env.taskset.args = { num_tasks = 100 }   # the taskset's own config fields (validated by its config class)

verifiers (`pip install verifiers`, an optional extra; 0.4 is tested) resolves the id to its `Taskset` class and
config exactly as its own CLI does (`verifiers.v1.utils.loaders`). The taskset's tasks, tools and rewards then
run through prime-rl's agent loop (token in / token out, our masking and turn cap), not through a verifiers
harness:

- a task's prompt is its `system_prompt` plus `prompt` (a string becomes one user message);
- tools are the taskset's and the task type's `Toolset`s (`@vf.tool` methods), registered on an in-process MCP
  server; the model's calls run there, with the episode's `trace.state` as the toolset's state (no state
  channel, no subprocess);
- an episode runs the task's `setup(trace, runtime=None)` on open, and on verify builds the verifiers `Trace` of
  the rollout (prompt, the sampled assistant turns, tool results) and runs the task's own `score(trace)`: the
  reward is verifiers' `trace.reward` (the weighted sum of its `@vf.reward`s), the metrics its `@vf.metric`s.
  A reward that did not run (None) or is not finite masks the rollout, and so does an exception in setup, a
  tool or scoring (EnvError).

Not supported (refused or masked, never silently wrong): tasks that need a container (`NEEDS_CONTAINER`) or a
runtime in setup/scoring (scoring skips runtime-dependent rewards, so the rollout is masked), harness-specific
tasksets, judges that call a model, and tool lists that change per task after setup (verifiers' `nemo-gym`
taskset: use prime-rl's own `nemo-gym` source, `env.taskset.id = "nemo-gym"`, which plays the same rows).
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

from prime_rl.envs.base import Task, VerifyResult, finite_metrics, reward_problem
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.sources.base import AsyncEpisode, EnvError, TaskSource

log = get_logger("orchestrator.verifiers")

_STATE: contextvars.ContextVar[Any] = contextvars.ContextVar("prime_rl_vf_state", default=None)


def load_verifiers_taskset(taskset_id: str, args: dict[str, Any]) -> Any:
    """The verifiers `Taskset` instance `taskset_id` names, configured with `args` (its config class validates).

    Raises:
        ImportError: verifiers is not installed (says how to install it).
        ModuleNotFoundError / TypeError / ValueError: verifiers' own errors for an unknown id or a bad config.
    """
    try:
        from verifiers.v1.utils.loaders import load_taskset, taskset_config_type
    except ImportError as e:
        raise ImportError(f"env.taskset.id = {taskset_id!r} names a verifiers taskset, but verifiers is not installed "
                          "(pip install 'prime-rl[verifiers]' or pip install verifiers)") from e  # fmt: skip
    config = taskset_config_type(taskset_id).model_validate({**args, "id": taskset_id})
    return load_taskset(config)


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(getattr(p, "text", "") or (p.get("text", "") if isinstance(p, dict) else "") for p in content)


def prompt_messages(data: Any) -> list[dict[str, Any]]:
    """Chat messages (dicts) of a verifiers `TaskData`: its system prompt, then its prompt."""
    out = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        out.append({"role": "user", "content": data.prompt})
    else:
        out += [{"role": m.role, "content": _text(m.content)} for m in data.prompt or []]
    return out


def to_trace_messages(messages: list[dict[str, Any]]) -> list[tuple[Any, bool]]:
    """verifiers messages of our chat messages, each with whether the model sampled it (assistant turns)."""
    from verifiers.v1.types import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

    out: list[tuple[Any, bool]] = []
    for message in messages:
        role, content = message.get("role"), _text(message.get("content"))
        if role == "system":
            out.append((SystemMessage(content=content), False))
        elif role == "user":
            out.append((UserMessage(content=content), False))
        elif role == "assistant":
            calls = [ToolCall(id=c["id"], name=c["function"]["name"],
                              arguments=a if isinstance(a := c["function"].get("arguments", {}), str) else json.dumps(a))
                     for c in message.get("tool_calls") or []]  # fmt: skip
            out.append((AssistantMessage(content=content or None, reasoning_content=message.get("reasoning_content"),
                                         tool_calls=calls or None), True))  # fmt: skip
        elif role == "tool" and message.get("tool_call_id"):
            tool_message = ToolMessage(tool_call_id=message["tool_call_id"], content=content, name=message.get("name"))
            out.append((tool_message, False))
    return out


def build_trace(vtask: Any, state: Any, messages: list[dict[str, Any]]) -> Any:
    """A verifiers `Trace` of one rollout: `messages` (prompt + trajectory, chat dicts) as a single branch."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask

    nodes = [MessageNode(parent=i - 1 if i else None, message=msg, sampled=sampled)
             for i, (msg, sampled) in enumerate(to_trace_messages(messages))]  # fmt: skip
    return Trace(task=TraceTask(type=type(vtask).__name__, data=vtask.data, key=vtask.key), state=state,
                 agent=AgentInfo(config=AgentConfig()), nodes=nodes, is_completed=True, ok=True)  # fmt: skip


class _ToolHost:
    """A taskset's toolsets on one in-process MCP server; calls see the episode's state (a context variable)."""

    def __init__(self, toolsets: list[Any]):
        from mcp.server.mcpserver import MCPServer

        self.mcp = MCPServer("prime-rl")
        for ts in toolsets:
            async def pull(ts=ts) -> Any:
                state = _STATE.get()
                return state if state is not None else ts._state_cls()

            async def push(before: bytes) -> None:  # the state object is shared in-process; nothing to send
                return None

            ts._pull_state, ts._push_state = pull, push
            ts.register(self.mcp)

    def tools(self) -> list[dict[str, Any]]:
        """The registered tools as chat-completions function tools (name, description, JSON-schema parameters)."""
        return [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                  "parameters": t.parameters or {"type": "object", "properties": {}}}}
                for t in self.mcp._tool_manager.list_tools()]  # fmt: skip

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        res = await self.mcp.call_tool(name, arguments)
        return "".join(getattr(c, "text", "") for c in res.content), bool(res.is_error)


class VerifiersEpisode(AsyncEpisode):
    """One rollout of one verifiers task: setup on open, tools on the shared host, `score` on verify."""

    def __init__(self, vtask: Any, host: _ToolHost, prompt: list[dict[str, Any]]):
        from verifiers.v1.state import state_cls

        self.vtask, self.host, self.prompt = vtask, host, prompt
        self.state = state_cls(type(vtask))()

    async def setup(self) -> None:
        trace = build_trace(self.vtask, self.state, self.prompt)
        await self.vtask.setup(trace, None)

    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                return f"Error: the arguments are not valid JSON ({e.msg})"
        if not isinstance(arguments, dict):
            return "Error: the arguments must be a JSON object"
        token = _STATE.set(self.state)
        try:
            text, _ = await self.host.call(name, arguments)
        except Exception as e:
            raise EnvError("tool_crash", f"{type(e).__name__}: {e}") from e
        finally:
            _STATE.reset(token)
        return text

    async def verify(self, final_response: str | None, trajectory: list[dict[str, Any]] | None = None) -> VerifyResult:
        messages = self.prompt + (trajectory if trajectory is not None else [{"role": "assistant", "content": final_response or ""}])
        trace = build_trace(self.vtask, self.state, messages)
        try:
            await self.vtask.score(trace, None)
        except Exception as e:
            raise EnvError("verify_crash", f"{type(e).__name__}: {e}") from e
        missing = [k for k, r in trace.rewards.items() if r is None or reward_problem(r.score, reward_range=None)]
        metrics = finite_metrics(trace.metrics)
        if missing or not trace.rewards:
            reason = f"verifiers reward(s) {missing or 'none'} did not score task {self.vtask.data.name or self.vtask.key!r}"
            return VerifyResult(0.0, metrics, True, reason)  # logged with the step's masked rollouts
        return VerifyResult(float(trace.reward), metrics)

    async def close(self) -> None:
        return None


class VerifiersSource(TaskSource):
    """A verifiers v1 taskset (`env.taskset.id`, configured by `env.taskset.args`; eval by `eval_args`)."""

    def __init__(self, name: str, taskset_id: str, args: dict[str, Any], eval_args: dict[str, Any] | None = None,
                 ratio: float = 1.0):  # fmt: skip
        self.name, self.ratio, self.taskset_id = name, ratio, taskset_id
        self._tasksets = {"train": load_verifiers_taskset(taskset_id, args)}
        self._tasksets["eval"] = self._tasksets["train"] if eval_args is None else load_verifiers_taskset(taskset_id, eval_args)
        cls = type(self._tasksets["train"])
        task_cls = cls.task_type()
        if getattr(task_cls, "NEEDS_CONTAINER", False):
            raise ValueError(f"verifiers taskset {taskset_id!r} needs a container per task, which prime-rl's agent "
                             "loop does not provide")  # fmt: skip
        cfg = self._tasksets["train"].config
        self.host = _ToolHost([*cls.toolsets(cfg), *task_cls.toolsets(cfg.task)])
        self._tools = self.host.tools()
        self._tasks: dict[str, list[Task]] = {}
        self._vtasks: dict[tuple[str, str], Any] = {}

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasksets:
            raise KeyError(f"unknown split {split!r} (train, eval)")
        if split not in self._tasks:
            out = []
            for i, vt in enumerate(self._tasksets[split]):
                tid = str(vt.data.id or vt.data.name or f"{self.taskset_id}-{i}")
                self._vtasks[(split, tid)] = vt
                out.append(Task(task_id=tid, split=split, index=i, messages=prompt_messages(vt.data),
                                tools=list(self._tools)))  # fmt: skip
            self._tasks[split] = out
        return self._tasks[split]

    async def open(self, task: Task) -> AsyncEpisode:
        ep = VerifiersEpisode(self._vtasks[(task.split, task.task_id)], self.host, [dict(m) for m in task.messages])
        try:
            await ep.setup()
        except Exception as e:
            raise EnvError("seed_crash", f"{type(e).__name__}: {e}") from e
        return ep
