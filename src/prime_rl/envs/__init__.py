"""Environments: tasks by split, episodes that take tool calls and end with `verify` (DESIGN.md, Environments)."""

from prime_rl.envs.base import Environment, Episode, Task, VerifyResult, list_envs, load_env, register_env

__all__ = ["Environment", "Episode", "Task", "VerifyResult", "list_envs", "load_env", "register_env"]
