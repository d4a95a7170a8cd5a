"""Runs inside the verifiers 0.4.0 peer venv with prime-rl's sources and this folder on PYTHONPATH.

    python verifiers_checks.py adapter                  -> {"rollouts": [...], "independent": [...]}
    python verifiers_checks.py nemo-gym URL ROWS SCHED  -> {"rewards": [...], "tool_texts": [...], "infos": [...]}
    python verifiers_checks.py both URL ROWS SCHED      -> {"adapter": <adapter's>, "nemo-gym": <nemo-gym's>}

`adapter`: the `vf_arith` taskset (verifiers' own API, vf_arith.py) as an `env.taskset.id`, played by prime-rl's
agent loop with a scripted policy: single-turn answers and tool-calling (multi-turn) rollouts. For each rollout it
also scores a verifiers `Trace` built here directly from verifiers' types (not through the adapter), so the test can
check the adapter's reward equals verifiers' own computation.

`nemo-gym`: verifiers' `nemo-gym` taskset against our resources server at URL: its task `setup` (seed), a tool call
exactly as its toolset posts it (`state.post(name, arguments)`), and its `nemo_gym` reward (verify).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path

import verifiers.v1 as vf
from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer, tool_call_text
from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.trace import AgentInfo, TraceTask
from vf_arith import ArithState


def trace_of(vtask, state, nodes: list[tuple[object, bool]]) -> vf.Trace:
    return vf.Trace(task=TraceTask(type=type(vtask).__name__, data=vtask.data), agent=AgentInfo(config=AgentConfig()),
                    state=state, nodes=[vf.MessageNode(parent=i - 1 if i else None, message=m, sampled=s)
                                        for i, (m, s) in enumerate(nodes)])  # fmt: skip


def arith_script(prompt: str, k: int) -> str:
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", prompt)[-1])
    task = (a - 1) // 3
    if task == 3:
        return "I do not know"  # wrong: reward 0
    if task % 2 == 1 and "<tool_response>" not in prompt:
        return tool_call_text("add", {"a": a, "b": b})  # multi-turn: call the tool first
    return str(a + b)


async def adapter() -> dict:
    from prime_rl.config.orchestrator import RendererConfig, SamplingConfig, SourceConfig
    from prime_rl.models.renderer import make_renderer
    from prime_rl.orchestrator.agent import AgentLimits, run_rollout
    from prime_rl.orchestrator.sources import build_source

    src = build_source(SourceConfig(name="arith", env={"taskset": {"id": "vf_arith", "args": {"num_tasks": 4}},
                                                      "agent": {"max_turns": 4}}))  # fmt: skip
    tok = tiny_tokenizer(Path(tempfile.mkdtemp()))
    renderer = make_renderer(tok, RendererConfig())
    rollouts, independent = [], []
    for task in src.tasks("train"):
        r = await run_rollout(task, src, ScriptedClient(tok, arith_script), renderer, SamplingConfig(),
                              AgentLimits(2048, 64))  # fmt: skip
        rollouts.append({"task_id": task.task_id, "reward": r.reward, "masked": r.masked, "error": r.error,
                         "turns": r.num_turns, "metrics": r.env_metrics, "tools": [t["function"]["name"] for t in task.tools],
                         "messages": r.messages})  # fmt: skip
        # verifiers' own scoring of the same completions, on a Trace built here from verifiers' types
        vtask = src._vtasks[("train", task.task_id)]
        state = ArithState()
        nodes: list[tuple[object, bool]] = [(vf.UserMessage(content=task.messages[0]["content"]), False)]
        for m in r.messages[1:]:
            if m["role"] == "assistant":
                calls = [vf.ToolCall(id=c["id"], name=c["function"]["name"], arguments=json.dumps(c["function"]["arguments"]))
                         for c in m.get("tool_calls") or []]  # fmt: skip
                nodes.append((vf.AssistantMessage(content=m["content"], tool_calls=calls or None), True))
                state.calls += len(calls)
            else:
                nodes.append((vf.ToolMessage(tool_call_id=m["tool_call_id"], content=m["content"]), False))
        trace = trace_of(vtask, state, nodes)
        await vtask.score(trace)
        independent.append({"reward": trace.reward, "metrics": dict(trace.metrics)})
    return {"rollouts": rollouts, "independent": independent}


async def nemo_gym(url: str, rows: str, sched: list[int]) -> dict:
    from verifiers.v1.tasksets.nemo_gym.toolset import NeMoGymState
    from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

    config = taskset_config_type("nemo-gym").model_validate({"id": "nemo-gym", "dataset": rows,
                                                              "task": {"resources_url": url}})  # fmt: skip
    out: dict = {"rewards": [], "tool_texts": [], "infos": []}
    for vtask in load_taskset(config):
        state = NeMoGymState()
        prompt = [(vf.UserMessage(content=m.content) if m.role == "user" else vf.SystemMessage(content=m.content), False)
                  for m in vtask.data.prompt]  # fmt: skip
        trace = trace_of(vtask, state, prompt)
        await vtask.setup(trace, None)  # POST /seed_session with the row; keeps the cookies
        assert state.tool_names == ["submit_schedule"], state.tool_names
        resp = await state.post("submit_schedule", {"schedule": sched})  # what NeMoGymToolset.call_tool sends
        assert resp.is_success, resp.text
        call = vf.ToolCall(id="call_0", name="submit_schedule", arguments=json.dumps({"schedule": sched}))
        trace = trace_of(vtask, state, [*prompt, (vf.AssistantMessage(content=None, tool_calls=[call]), True),
                                        (vf.ToolMessage(tool_call_id="call_0", content=resp.text), False),
                                        (vf.AssistantMessage(content="done"), True)])  # fmt: skip
        await vtask.score(trace)  # its nemo_gym reward: POST /verify with the row + the trace as a Responses object
        out["rewards"].append(trace.rewards["nemo_gym"].score)
        out["tool_texts"].append(resp.text)
        out["infos"].append(trace.info["nemo_gym"])
    return out


if __name__ == "__main__":
    if sys.argv[1] == "adapter":
        result = asyncio.run(adapter())
    elif sys.argv[1] == "both":
        result = {"adapter": asyncio.run(adapter()),
                  "nemo-gym": asyncio.run(nemo_gym(sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))}  # fmt: skip
    else:
        result = asyncio.run(nemo_gym(sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
    print(json.dumps(result, default=str))
