"""Resolved configs: a parsed config written back as TOML (`configs/NAME.toml` of a run, `--dry-run`), which parses
back to the same config, secrets excepted: a secret's value (`config.secrets`) is written as `<redacted>`, and the
writing process passes it on by environment variable (`secrets.SECRETS_ENV`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prime_rl.config.secrets import REDACTED, is_secret, remember


def config_to_toml(cfg: BaseModel) -> str:
    """Serialise a config to TOML so that parsing it back gives the same config, but for its secrets (a text field
    named like a secret, `config.secrets.is_secret`), written as `<redacted>`.

    TOML has no null: a None whose field default is also None is omitted; the fields that are None where their
    default is not are listed in their section's `_null` key (`base.NULL_KEY`: `_null = ["max_norm"]` under
    `[optim]`), which `BaseConfig` reads back as None. No value is written as the text `"None"`, so a text field
    holding "None" reads back as that text (`tests/test_config_roundtrip.py`: write -> read for every command and
    for the processes' configs of a dry run). docs/config.md states the convention.
    """
    import tomli_w

    return tomli_w.dumps(_dump_for_toml(cfg))


def _dump_for_toml(model: BaseModel) -> dict[str, Any]:
    from prime_rl.config.base import NULL_KEY

    out: dict[str, Any] = {}
    nulls = []
    for name, finfo in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None:
            if finfo.default is not None or finfo.default_factory is not None:
                nulls.append(name)
            continue
        out[name] = REDACTED if is_secret(name) and isinstance(value, str) else _dump_value(value)
    if nulls:
        out = {NULL_KEY: nulls, **out}
    return out


def _dump_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _dump_for_toml(value)
    if isinstance(value, list | tuple):
        return [_dump_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, Path):
        return str(value)
    return value


def write_config(cfg: BaseModel, path: Path) -> Path:
    """Write `cfg` as TOML to `path` atomically (temporary name, fsync, rename), its secrets redacted; their values
    go to this process's environment under the file's stem (`secrets.remember`), so the processes it starts
    afterwards read `@ path` whole (`config.loader.parse_config`)."""
    from prime_rl.transport.atomic import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, config_to_toml(cfg))
    remember(path.stem, cfg)
    return path
