"""A small verifiers v1 taskset written with verifiers' own API (`Taskset`, `Task`, `Toolset`, `@vf.tool`,
`@vf.reward`, `@vf.metric`, a `State`), importable as taskset id `vf_arith` when this folder is on sys.path.

Task i asks for a + b. The `add` tool returns the sum and counts its calls in the rollout's state; `correct`
(reward) is 1.0 when the last assistant message is exactly the sum; `tool_calls` (metric) reads the state."""

from __future__ import annotations

from collections.abc import Iterator

import verifiers.v1 as vf
from verifiers.v1.mcp import SharedToolsetConfig, Toolset
from verifiers.v1.taskset import TasksetConfig


class ArithState(vf.State):
    calls: int = 0


class ArithData(vf.TaskData):
    a: int
    b: int


class AddTools(Toolset[SharedToolsetConfig, ArithState]):
    TOOL_PREFIX = None

    @vf.tool
    async def add(self, a: int, b: int) -> str:
        """Add two integers."""
        self.state.calls += 1
        return str(a + b)


class ArithTask(vf.Task[ArithData, ArithState]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        last = [n.message for n in trace.nodes if n.message.role == "assistant"][-1]
        return float((last.content or "").strip() == str(self.data.a + self.data.b))

    @vf.metric
    async def tool_calls(self, trace: vf.Trace) -> float:
        return float(trace.state.calls)


class ArithConfig(TasksetConfig):
    num_tasks: int = 4


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    @classmethod
    def toolsets(cls, config: ArithConfig) -> list[Toolset]:
        return [AddTools(SharedToolsetConfig())]

    def load(self) -> Iterator[ArithTask]:
        for i in range(self.config.num_tasks):
            a, b = 3 * i + 1, 5 * i + 2
            yield ArithTask(ArithData(name=f"arith-{i}", prompt=f"What is {a} + {b}?", a=a, b=b), self.config.task)


__all__ = ["ArithTaskset"]
