"""NeMo Gym rows: a task as `{"responses_create_params": {"input", "tools"}, "task_id", "split", "index", "info"}`.

`responses_create_params` follows the OpenAI Responses API: `input` holds the chat messages (system, user) and
`tools` the function tools in the Responses form `{"type": "function", "name", "description", "parameters",
"strict": false}` (strict must be off: Responses defaults it on). `info` carries what the environment needs to
rebuild the episode (GridSim: date, point, prices), so a row alone suffices to seed a session.

`env-server write ENV OUT` lays out `OUT/resources_servers/<ENV>_v1/`:
`server.json` (our serve config), `configs/<ENV>_v1.yaml` (NeMo Gym's config form), `data/train.jsonl`,
`data/eval.jsonl`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from prime_rl.envs.base import Environment, Task, load_env

SERVER_CONFIG = "server.json"
FORMAT_VERSION = 1


def to_responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Chat Completions tool `{"type": "function", "function": {...}}` -> Responses tool (flat, strict off)."""
    if "function" not in tool:
        return dict(tool)
    fn = tool["function"]
    out = {"type": "function", "name": fn["name"], "description": fn.get("description", "")}
    out["parameters"] = fn.get("parameters", {"type": "object", "properties": {}})
    out["strict"] = False
    return out


def to_chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Responses tool (flat) -> Chat Completions tool; a tool already in chat form is returned as is."""
    if "function" in tool:
        return dict(tool)
    fn = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    return {"type": "function", "function": fn}


def task_to_row(task: Task) -> dict[str, Any]:
    """One JSONL row of `task`."""
    return {
        "responses_create_params": {"input": task.messages, "tools": [to_responses_tool(t) for t in task.tools]},
        "task_id": task.task_id,
        "split": task.split,
        "index": task.index,
        "info": task.info,
    }


def row_to_task(row: dict[str, Any]) -> Task:
    """The task of a row (tools back in Chat Completions form).

    Raises:
        ValueError: the row lacks `responses_create_params.input` (a list) or `task_id` (names the field).
    """
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise ValueError("row.responses_create_params must be an object with `input` (messages) and `tools`")
    messages = params.get("input")
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list):
        raise ValueError("row.responses_create_params.input must be a list of messages")
    tools = params.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("row.responses_create_params.tools must be a list of function tools")
    task_id = row.get("task_id")
    if not isinstance(task_id, str):
        raise ValueError("row.task_id must be a string")
    info = row.get("info") or {}
    if not isinstance(info, dict):
        raise ValueError("row.info must be an object")
    index = row.get("index", 0)
    return Task(
        task_id=task_id,
        split=str(row.get("split", "train")),
        index=index if isinstance(index, int) else 0,
        messages=messages,
        tools=[to_chat_tool(t) for t in tools],
        info=info,
    )


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file. Raises ValueError naming the line of a bad row."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: a row must be a JSON object")
            rows.append(row)
    return rows


def server_dir_name(env_name: str) -> str:
    return env_name.replace("-", "_") + "_v1"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_server(env_name: str, out: str | Path, env_args: dict[str, Any] | None = None,
                 env: Environment | None = None) -> Path:  # fmt: skip
    """Write `out/resources_servers/<env>_v1/` (config and train/eval rows) for built-in environment `env_name`.

    Returns:
        the server directory (what `env-server serve` takes).
    Raises:
        KeyError: unknown environment.
    """
    env_args = dict(env_args or {})
    env = env or load_env(env_name, **env_args)
    name = server_dir_name(env_name)
    root = Path(out) / "resources_servers" / name
    for split in ("train", "eval"):
        lines = [json.dumps(task_to_row(t), separators=(",", ":")) for t in env.tasks(split)]
        _atomic_write(root / "data" / f"{split}.jsonl", "\n".join(lines) + "\n")
    cfg = {"format": FORMAT_VERSION, "env": env_name, "env_args": env_args}
    _atomic_write(root / SERVER_CONFIG, json.dumps(cfg, indent=2, default=str) + "\n")
    yaml = (
        f"{name}:\n  resources_servers:\n    {name}:\n      entrypoint: prime_rl.envs.nemo_gym.server\n"
        f"      domain: other\n      description: prime-rl built-in environment {env_name}\n"
        f"      datasets:\n      - name: train\n        type: train\n        jsonl_fpath: data/train.jsonl\n"
        f"      - name: eval\n        type: validation\n        jsonl_fpath: data/eval.jsonl\n"
    )
    _atomic_write(root / "configs" / f"{name}.yaml", yaml)
    return root


def load_server_config(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """Find and read `server.json` in `path` (a server dir, or the `OUT` root holding exactly one).

    Raises:
        FileNotFoundError: none found (says what to run). ValueError: malformed config.
    """
    p = Path(path)
    candidates = (
        [p / SERVER_CONFIG] if (p / SERVER_CONFIG).is_file() else sorted(p.glob(f"resources_servers/*/{SERVER_CONFIG}"))
    )
    if len(candidates) != 1:
        what = "no" if not candidates else f"{len(candidates)}"
        raise FileNotFoundError(
            f"{what} {SERVER_CONFIG} under {p}; run `env-server write ENV OUT` and serve OUT/resources_servers/ENV_v1"
        )
    cfg = json.loads(candidates[0].read_text())
    if not isinstance(cfg, dict) or not isinstance(cfg.get("env"), str):
        raise ValueError(f"{candidates[0]}: must be an object with `env` (a built-in environment name)")
    if not isinstance(cfg.get("env_args", {}), dict):
        raise ValueError(f"{candidates[0]}: `env_args` must be an object")
    return candidates[0].parent, cfg
