"""Which config fields hold secrets (bearer tokens, API keys), how resolved configs leave them out, and how the
processes that read those configs get them back.

A field is a secret when its name is `token`, `api_key`, `password` or `secret`, or ends with `_token`, `_api_key`,
`_password` or `_secret` (`client.api_key`, `rollout_transport.token`, `server.token`), and its value is text.
A resolved config (`configs/NAME.toml`, `config.resolved.write_config`) holds `REDACTED` in place of each secret; the
process that writes it puts the values in its environment variable `PRIME_RL_SECRETS` (JSON: config name -> dotted
field -> value), which the processes it starts inherit (`rl`'s children, a Slurm job submitted with `sbatch`), and
`config.loader.parse_config` reads a `REDACTED` field of `@ configs/NAME.toml` back from there.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, MutableMapping
from typing import Any

from pydantic import BaseModel

REDACTED = "<redacted>"
"""The text written in place of a secret's value."""

SECRETS_ENV = "PRIME_RL_SECRETS"
"""Environment variable holding the secrets of the resolved configs a process wrote: JSON {config name (the file's
stem: `orchestrator`, `inference-1`): {dotted field: value}}."""

_SECRET_NAME = re.compile(r"(?:^|_)(?:token|api_key|password|secret)$")


def is_secret(name: str) -> bool:
    """Whether the config field `name` (its last key: `api_key`, `token`) holds a secret."""
    return bool(_SECRET_NAME.search(name))


def secret_fields(cfg: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(path, value) of every secret field of `cfg` that holds text (a path is field names and list indices:
    `("train", "source", 0, "env", "taskset", "task", "token")`)."""
    if isinstance(cfg, BaseModel):
        for name in type(cfg).model_fields:
            value = getattr(cfg, name)
            if is_secret(name) and isinstance(value, str):
                yield prefix + (name,), value
            else:
                yield from secret_fields(value, prefix + (name,))
    elif isinstance(cfg, list | tuple):
        for i, item in enumerate(cfg):
            yield from secret_fields(item, prefix + (i,))


def dotted_key(path: tuple) -> str:
    """The key of a field's path in `SECRETS_ENV`: its parts joined by dots (`train.source.0.env.taskset.task.token`)."""
    return ".".join(str(p) for p in path)


def remember(name: str, cfg: BaseModel, environ: MutableMapping[str, str] | None = None) -> None:
    """Put the secrets of config `name` (written redacted) in `environ` (default: this process's environment, which
    the processes it starts inherit), replacing those remembered for `name` before."""
    env = os.environ if environ is None else environ
    table = given(env)
    values = {dotted_key(path): v for path, v in secret_fields(cfg) if v != REDACTED}
    if values:
        table[name] = values
    else:
        table.pop(name, None)
    if table:
        env[SECRETS_ENV] = json.dumps(table)
    else:
        env.pop(SECRETS_ENV, None)


def given(environ: MutableMapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """The secrets `SECRETS_ENV` holds (empty when unset or not a JSON table)."""
    text = (os.environ if environ is None else environ).get(SECRETS_ENV, "")
    try:
        table = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return table if isinstance(table, dict) else {}


def adopt(table: dict[str, dict[str, str]], environ: MutableMapping[str, str] | None = None) -> None:
    """Add `table` (config name -> dotted field -> value, as `given` returns it: another node's secrets) to the
    secrets `environ` (default: this process's environment) passes on."""
    env = os.environ if environ is None else environ
    merged = {**given(env), **table}
    if merged:
        env[SECRETS_ENV] = json.dumps(merged)
