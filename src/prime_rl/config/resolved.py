"""Resolved configs: a parsed config written back as TOML (`configs/NAME.toml` of a run, `--dry-run`), which parses
back to the same config, secrets excepted: a secret's value (`config.secrets`) is written as `<redacted>`, and the
writing process passes it on by environment variable (`secrets.SECRETS_ENV`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

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


DRY_RUN_DIR = "dry-run"
"""Where a dry run writes its resolved configs when a run directory's `configs/` holds other ones (`write_dry_run`)."""


class DryRunConfigs(NamedTuple):
    """What `write_dry_run` did: `paths` name -> the file holding that config as the dry run resolved it;
    `unchanged` the names whose file already held it (not rewritten); `differ` the file names in the run's
    `configs/` that hold other text (then `paths` lie in `configs/dry-run/`)."""

    paths: dict[str, Path]
    unchanged: list[str]
    differ: list[str]


def write_dry_run(configs: dict[str, BaseModel], configs_dir: Path) -> DryRunConfigs:
    """Write a dry run's resolved configs (`name -> config`) as `configs_dir/<name>.toml` without altering what a
    run in that directory may be using. When every one of those files is missing or holds the same text, the
    missing ones are written and the identical ones left untouched. When one exists with other text (another run's
    settings, possibly live: its processes read these files when they start), none of them is touched and the whole
    set goes to `configs_dir/dry-run/<name>.toml` instead, one consistent set."""
    texts = {name: config_to_toml(cfg) for name, cfg in configs.items()}
    differ = [f"{name}.toml" for name, text in texts.items()
              if (configs_dir / f"{name}.toml").is_file() and (configs_dir / f"{name}.toml").read_text() != text]  # fmt: skip
    target = configs_dir / DRY_RUN_DIR if differ else configs_dir
    paths, unchanged = {}, []
    for name, cfg in configs.items():
        path = target / f"{name}.toml"
        if path.is_file() and path.read_text() == texts[name]:
            paths[name] = path
            unchanged.append(name)
        else:
            paths[name] = write_config(cfg, path)
    return DryRunConfigs(paths, unchanged, differ)


def dry_run_lines(done: DryRunConfigs, configs_dir: Path, writer: str | None = None) -> list[str]:
    """What a dry run prints about its resolved configs (`write_dry_run`'s `done`, for the run directory's
    `configs_dir`): where each one is, after a warning when the run directory's own were left as they were
    (`writer`: the command that writes those when it starts for real, e.g. `rl`; None: none does)."""
    lines = []
    if done.differ:
        fix = f"`{writer}` without --dry-run writes them when it starts" if writer else "move the new files over them"
        lines.append(
            f"warning: {configs_dir} holds resolved configs that differ from this dry run's ({', '.join(done.differ)}); "
            f"a run in {configs_dir.parent} may be using them (its processes read them when they start), so --dry-run "
            f"leaves every file there as it is and writes its resolved configs to {configs_dir / DRY_RUN_DIR}/. To "
            f"replace them, stop that run's processes first; then {fix}")  # fmt: skip
    for name, path in done.paths.items():
        lines.append(f"resolved {name} config {'unchanged in' if name in done.unchanged else 'written to'} {path}")
    return lines
