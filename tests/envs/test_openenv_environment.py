"""prime-rl's OpenEnv environment in process (no server): the typed action, task choice at reset, and how an
episode ends (the verify score, or masked when a tool or the verifier fails)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from tests.envs.openenv_support import require_openenv

require_openenv()

from prime_rl.envs import load_env  # noqa: E402
from prime_rl.envs.base import Environment, Episode, Task, VerifyResult  # noqa: E402
from prime_rl.envs.gridsim.baselines import greedy  # noqa: E402
from prime_rl.envs.openenv.environment import NO_EPISODE, ResetError, SplitTasks, TaskEnvironment  # noqa: E402
from prime_rl.envs.openenv.models import TaskAction  # noqa: E402


def test_action_is_a_tool_call_or_the_final_reply():
    call = TaskAction.model_validate({"type": "call_tool", "tool_name": "submit_schedule", "arguments": {"x": 1}})
    assert call.type == "call_tool" and call.arguments == {"x": 1}
    assert TaskAction(tool_name="t", arguments='{"a": 1}').arguments == '{"a": 1}'  # the model's JSON text, as sent
    assert TaskAction(type="final", content="done").content == "done"
    for bad, field in (({"type": "call_tool"}, "tool_name"), ({"tool_name": "t", "content": "x"}, "content"),
                       ({"type": "final", "tool_name": "t"}, "final"), ({"type": "final", "arguments": {"a": 1}}, "final"),
                       ({"type": "list_tools"}, "type"), ({"tool_name": "t", "extra": 1}, "extra")):  # fmt: skip
        with pytest.raises(ValidationError, match=field):
            TaskAction.model_validate(bad)


def _tasks(n: int, split: str = "eval") -> list[Task]:
    return [Task(f"t{i}", split, i, [{"role": "user", "content": str(i)}]) for i in range(n)]


def test_reset_picks_by_id_index_seed_or_next():
    env = load_env("reverse-text")
    split = SplitTasks(env, "eval", env.tasks("eval"))
    ids = [t.task_id for t in env.tasks("eval")]
    assert split.pick(task_id=ids[7]).task_id == ids[7]
    assert split.pick(index=3).task_id == ids[3]
    assert split.pick(seed=105).task_id == ids[5]  # 105 mod 100
    assert [split.pick().task_id for _ in range(3)] == ids[:3]  # the shared cursor
    many = SplitTasks(env, "x", _tasks(2))
    assert [many.pick().task_id for _ in range(5)] == ["t0", "t1", "t0", "t1", "t0"]  # wraps around
    with pytest.raises(ResetError, match="not both"):
        split.pick(task_id=ids[0], index=0)
    with pytest.raises(ResetError, match="no task 'nope' in split 'eval'") as e:
        split.pick(task_id="nope")
    assert e.value.status == 404
    for bad in (100, -1, True):
        with pytest.raises(ResetError, match="is not a task"):
            split.pick(index=bad)
    with pytest.raises(ValueError, match="appears twice"):
        SplitTasks(env, "dup", _tasks(2) + _tasks(1))
    with pytest.raises(ResetError, match=r"unknown reset argument\(s\) \['taskid'\]"):
        TaskEnvironment(split).reset(taskid="t0")


def test_gridsim_episode_reward_is_the_in_process_verify_score():
    env = load_env("gridsim")
    task = env.tasks("eval")[4]
    oe = TaskEnvironment(SplitTasks(env, "eval", env.tasks("eval")))
    assert oe.step(TaskAction(type="final")).error == NO_EPISODE
    first = oe.reset(task_id=task.task_id, episode_id="e1")
    assert (first.messages, first.tools, first.info, first.split, first.index) == (
        task.messages, task.tools, task.info, "eval", 4)  # fmt: skip
    schedule = greedy(task.info["prices"], None)
    ref = env.episode(task)
    want_text = ref.call_tool("submit_schedule", {"schedule": schedule})
    want = ref.verify()
    got = oe.step(TaskAction(tool_name="submit_schedule", arguments={"schedule": schedule}))
    assert got.result == want_text and not got.done and got.reward is None
    end = oe.step(TaskAction(type="final", content="submitted"))
    assert end.done and end.reward == want.reward and 0.2 < end.reward < 1.0
    assert end.metrics == want.metrics and not end.masked
    again = oe.step(TaskAction(type="final"))
    assert again.reward == want.reward and "ended" in again.error  # the same result, nothing re-run
    assert oe.state.model_dump() == {"episode_id": "e1", "step_count": 2, "task_id": task.task_id, "split": "eval",
                                     "done": True, "reward": want.reward}  # fmt: skip


class _Broken(Environment):
    name = "broken"

    def __init__(self, mode: str):
        self.mode = mode

    def tasks(self, split: str) -> list[Task]:
        return _tasks(1, split)

    def episode(self, task: Task) -> Episode:
        mode = self.mode

        class Ep(Episode):
            def call_tool(self, name, arguments):
                raise RuntimeError("tool crashed")

            def verify(self, final_response=None):
                if mode == "raise":
                    raise ZeroDivisionError("verifier crashed")
                reward = {"nan": math.nan, "huge": 1e308, "bool": True}.get(mode, 0.5)
                return VerifyResult(reward, {"m": 1.0, "bad": math.inf})

        ep = Ep()
        ep.task = task
        return ep


@pytest.mark.parametrize("mode, action, reason", [
    ("ok", TaskAction(tool_name="t"), "tool 't' raised RuntimeError('tool crashed')"),
    ("raise", TaskAction(type="final"), "verify raised ZeroDivisionError('verifier crashed')"),
    ("nan", TaskAction(type="final"), "the verifier returned reward nan"),
    ("huge", TaskAction(type="final"), "the verifier returned reward 1e+308 outside [-1e+06, 1e+06]"),
    ("bool", TaskAction(type="final"), "the verifier returned reward True (bool)"),
])  # fmt: skip
def test_a_crash_or_non_finite_reward_ends_the_episode_masked(mode, action, reason):
    env = _Broken(mode)
    oe = TaskEnvironment(SplitTasks(env, "eval", env.tasks("eval")))
    oe.reset()
    end = oe.step(action)
    assert end.done and end.masked and end.reward is None and reason in end.reason
    assert oe.state.done and oe.state.reward is None


def test_finite_metrics_only():
    env = _Broken("ok")
    oe = TaskEnvironment(SplitTasks(env, "eval", env.tasks("eval")))
    oe.reset()
    end = oe.step(TaskAction(type="final"))
    assert end.reward == 0.5 and end.metrics == {"m": 1.0}


def test_openenv_command_help_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys; from prime_rl.cli.env_server import main\ntry: main(['openenv', '--help'])\n"
            "except SystemExit: pass\nassert not {'openenv','fastapi','torch','gradio','numpy'} & set(sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--max-concurrent-envs" in out.stdout, out.stderr
