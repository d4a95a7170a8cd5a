"""Environments: tasks by split, episodes that take tool calls and end with `verify` (docs/design.md, "Contracts between processes")."""

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult, list_envs, load_env, register_env

__all__ = ["Environment", "Episode", "Task", "VerifyResult", "list_envs", "load_env", "register_env"]
