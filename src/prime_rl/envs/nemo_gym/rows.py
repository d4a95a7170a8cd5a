"""NeMo Gym rows: the JSONL format tasks travel in between prime-rl, NeMo Gym and verifiers.

A row is one JSON object per line:

    {"responses_create_params": {"input": [messages...], "tools": [function tools...]},
     "task_id": "gridsim-eval-0", "split": "eval", "index": 0, "info": {...}}

- `responses_create_params` (required to play a row) follows the OpenAI Responses API: `input` holds the chat
  messages (system/developer, user) or one string, `tools` the function tools in the Responses form
  `{"type": "function", "name", "description", "parameters", "strict": false}` (strict off: Responses defaults it
  on, and our environments validate arguments themselves).
- Every other field is for the environment's verifier and is passed through untouched (NeMo Gym's example rows
  carry e.g. `expected_count`, `initial_count`). Rows we write add `task_id` (unique within the environment),
  `split`, `index` and `info` (what rebuilds the episode: GridSim's date, hub and prices), so a row alone
  suffices to seed a session. All four are optional when reading: a row without `task_id` gets
  `<file stem>-<line index>` from `read_tasks`.

`env-server write ENV OUT` lays out `OUT/resources_servers/<ENV>_v1/` the way NeMo Gym lays out a resources
server: `configs/<ENV>_v1.yaml` (a config NeMo Gym's own validation accepts: domain, datasets with a license),
`app.py` (the entrypoint NeMo Gym's tooling starts as `python app.py`, reading host and port from NeMo Gym's
config in the environment), `data/train.jsonl`, `data/eval.jsonl` (and `data/<split>.jsonl` for any further split
the environment lists in `splits`, e.g. GridSim's `forward` split with `forward_from`), and `server.json` (what
`env-server serve` reads: the built-in environment and its arguments).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from prime_rl.envs.base import Environment, Task, load_env, refuse_user_turns
from prime_rl.hf_data import read_jsonl

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


def row_to_task(row: dict[str, Any], default_task_id: str | None = None) -> Task:
    """The task of a row (tools back in Chat Completions form). A row without `task_id` takes `default_task_id`.

    Raises:
        ValueError: the row lacks `responses_create_params.input` (a list or a string), or has neither a string
            `task_id` nor a `default_task_id` (names the field).
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
    task_id = row.get("task_id", default_task_id)
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        task_id = str(task_id)
    if not isinstance(task_id, str):
        raise ValueError("row.task_id must be a string (or leave it out and give the row a default id)")
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


def read_tasks(path: str | Path, split: str) -> list[tuple[Task, dict[str, Any]]]:
    """(task, row) of every row of a JSONL file, as `split`; a row without `task_id` is `<file stem>-<line index>`.

    Raises:
        ValueError: a bad row (names the file and line) or two rows with the same `task_id`.
    """
    return tasks_from_rows(read_rows(path), split, str(path), Path(path).stem)


def tasks_from_rows(rows: list[dict[str, Any]], split: str, origin: str, stem: str) -> list[tuple[Task, dict[str, Any]]]:
    """(task, row) of every row, as `split`; a row without `task_id` is `<stem>-<index>`; `origin` names the source
    in errors.

    Raises:
        ValueError: a bad row (names `origin` and the row) or two rows with the same `task_id`.
    """
    out, seen = [], set()
    for i, row in enumerate(rows):
        try:
            task = row_to_task(row, default_task_id=f"{stem}-{i}")
        except ValueError as e:
            raise ValueError(f"{origin}: row {i}: {e}") from None
        if task.task_id in seen:
            raise ValueError(f"{origin}: row {i}: task_id {task.task_id!r} repeats an earlier row's")
        seen.add(task.task_id)
        task.split = split
        out.append((task, row))
    return out


def read_rows(path: str | Path, field: str = "dataset") -> list[dict[str, Any]]:
    """Rows of a JSONL file, each a JSON object (`prime_rl.hf_data.read_jsonl`). Raises DataLoadError (a ValueError)
    naming `field`, the file and the line of a bad row."""
    return read_jsonl(Path(path), field)


def server_dir_name(env_name: str) -> str:
    return env_name.replace("-", "_") + "_v1"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def env_splits(env: Environment) -> tuple[str, ...]:
    """The splits whose rows `write_server` writes: `train`, `eval`, then any further split in `env.splits`."""
    return ("train", "eval") + tuple(s for s in getattr(env, "splits", ()) if s not in ("train", "eval"))


def write_server(env_name: str, out: str | Path, env_args: dict[str, Any] | None = None,
                 env: Environment | None = None, license: str = "Apache 2.0") -> Path:  # fmt: skip
    """Write `out/resources_servers/<env>_v1/` (config and train/eval rows) for built-in environment `env_name`.

    `license` is the datasets' license in NeMo Gym's vocabulary (it requires one for train and validation data;
    the rows are generated by prime-rl, Apache 2.0 like the project).

    Returns:
        the server directory (what `env-server serve` takes).
    Raises:
        KeyError: unknown environment.
    """
    env_args = dict(env_args or {})
    env = env or load_env(env_name, **env_args)
    refuse_user_turns(env, "the NeMo Gym resources-server protocol")
    name = server_dir_name(env_name)
    root = Path(out) / "resources_servers" / name
    splits = env_splits(env)
    for split in splits:
        lines = [json.dumps(task_to_row(t), separators=(",", ":")) for t in env.tasks(split)]
        _atomic_write(root / "data" / f"{split}.jsonl", "\n".join(lines) + "\n")
    for stale in (root / "data").glob("*.jsonl"):  # a split of an earlier write that this environment lacks
        if stale.stem not in splits:
            stale.unlink()
    cfg = {"format": FORMAT_VERSION, "env": env_name, "env_args": env_args}
    _atomic_write(root / SERVER_CONFIG, json.dumps(cfg, indent=2, default=str) + "\n")
    _atomic_write(root / "configs" / f"{name}.yaml", nemo_gym_config(name, env_name, license=license, splits=splits))
    _atomic_write(root / "app.py", APP_PY)
    return root


APP_PY = '''"""NeMo Gym entrypoint of a prime-rl resources server (written by `env-server write`).

NeMo Gym's tooling starts it as `python app.py` in this folder, with its merged config in $NEMO_GYM_CONFIG_DICT
and this server's key in $NEMO_GYM_CONFIG_PATH; it serves this folder on the host and port given there. The
interpreter needs prime-rl installed. Without those variables, use `env-server serve .` instead.
"""

import sys
from pathlib import Path

from prime_rl.envs.nemo_gym.cli import serve_nemo_gym_entrypoint

if __name__ == "__main__":
    sys.exit(serve_nemo_gym_entrypoint(Path(__file__).resolve().parent))
'''


def nemo_gym_config(name: str, env_name: str, license: str = "Apache 2.0",
                    splits: tuple[str, ...] = ("train", "eval")) -> str:  # fmt: skip
    """NeMo Gym's YAML config of server `name`: one resources server (entrypoint `app.py`, domain, description)
    with a dataset per split, `train` of type train and every other of type validation (NeMo Gym requires a
    `license` on each; their paths are relative to `OUT`, laid out like NeMo Gym's own root)."""
    import yaml

    server = {
        "entrypoint": "app.py", "domain": "agent" if env_name == "gridsim" else "other", "verified": False,
        "description": f"prime-rl built-in environment {env_name}",
        "datasets": [
            {"name": s, "type": "train" if s == "train" else "validation",
             "jsonl_fpath": f"resources_servers/{name}/data/{s}.jsonl", "license": license}
            for s in splits
        ],
    }  # fmt: skip
    return yaml.safe_dump({name: {"resources_servers": {name: server}}}, sort_keys=False)


def load_server_config(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """Find and read `server.json` in `path` (a server dir, or the `OUT` root holding exactly one).

    Raises:
        FileNotFoundError: none found (says what to run). ValueError: malformed config.
    """
    root = Path(path)
    candidates = (
        [root / SERVER_CONFIG]
        if (root / SERVER_CONFIG).is_file()
        else sorted(root.glob(f"resources_servers/*/{SERVER_CONFIG}"))
    )
    if len(candidates) != 1:
        what = "no" if not candidates else f"{len(candidates)}"
        raise FileNotFoundError(
            f"{what} {SERVER_CONFIG} under {root}; run `env-server write ENV OUT` and serve "
            "OUT/resources_servers/ENV_v1"
        )
    cfg = json.loads(candidates[0].read_text())
    if not isinstance(cfg, dict) or not isinstance(cfg.get("env"), str):
        raise ValueError(f"{candidates[0]}: must be an object with `env` (a built-in environment name)")
    if not isinstance(cfg.get("env_args", {}), dict):
        raise ValueError(f"{candidates[0]}: `env_args` must be an object")
    return candidates[0].parent, cfg
