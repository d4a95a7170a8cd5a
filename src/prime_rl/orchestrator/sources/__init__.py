"""Task sources: where a rollout's task and episode come from.

A source gives tasks by split and opens async episodes; every kind looks the same to the agent loop
(`base.TaskSource`, `base.AsyncEpisode`). Kinds, one module each: `inprocess` (a built-in environment, `env.id`) and
`nemo_gym` (rows played against a NeMo Gym resources server, `env.taskset.id = "nemo-gym"`) and `verifiers_taskset`
(any installed verifiers v1 taskset, `env.taskset.id = "<its id>"`; verifiers is imported only then). `build_source` picks the kind a
`[[...source]]` entry names; `capacity.CapacityGate` enforces each source's concurrency cap.
"""

from __future__ import annotations

from prime_rl.config.orchestrator import EnvConfig, SourceConfig
from prime_rl.envs.base import load_env
from prime_rl.orchestrator.sources.base import AsyncEpisode, EnvError, TaskSource
from prime_rl.orchestrator.sources.capacity import CapacityGate
from prime_rl.orchestrator.sources.inprocess import InProcessEpisode, InProcessSource
from prime_rl.orchestrator.sources.nemo_gym import NemoGymSource

__all__ = [
    "AsyncEpisode", "CapacityGate", "EnvError", "InProcessEpisode", "InProcessSource", "NemoGymSource", "TaskSource",
    "build_source",
]


def build_source(cfg: SourceConfig) -> TaskSource:
    """The source a `[[...source]]` entry names: a built-in environment, NeMo Gym rows or a verifiers taskset (an
    eval source has no `ratio`: 1)."""
    env: EnvConfig = cfg.env
    ratio = getattr(cfg, "ratio", 1.0)
    source: TaskSource
    if env.id is not None:
        source = InProcessSource(cfg.name, load_env(env.id, **env.args), ratio=ratio)
    elif env.taskset.id == "nemo-gym":
        source = NemoGymSource(cfg.name, env.taskset, ratio=ratio)
    else:
        from prime_rl.orchestrator.sources.verifiers_taskset import VerifiersSource

        ts = env.taskset
        source = VerifiersSource(cfg.name, ts.id, ts.args, ts.eval_args, ratio=ratio)
    source.max_turns = env.agent.max_turns
    return source
