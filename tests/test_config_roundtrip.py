"""Resolved configs: every command's config written as TOML (`config_to_toml`) reads back equal, None fields
included (a None whose default is None is left out; any other is written as pydantic_config's `"None"` text); and
the reference's older field names (seconds without `_s`) still parse."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from prime_rl.cli.config_docs import commands
from prime_rl.config.loader import config_to_toml, parse_config

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "examples" / "gridsim" / "seed.toml"


def _optional_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of the fields (nested sections included) that admit None and are not None now."""
    out = []
    for name, finfo in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out += _optional_fields(value, f"{prefix}{name}.")
        elif value is not None and "None" in str(finfo.annotation):
            out.append(f"{prefix}{name}")
    return out


def _default_args(cls: type[BaseModel]) -> list[str]:
    """Flags that fill a command's required fields with a plain value (a path or name)."""
    args = []
    for name, finfo in cls.model_fields.items():
        if finfo.is_required():
            args += [f"--{name}", "x"]
    return args


@pytest.mark.parametrize("prog,cls", [(p, c) for p, c, _ in commands()], ids=[p for p, _, _ in commands()])
def test_write_then_read_gives_the_same_config_with_none_fields(prog, cls, tmp_path):
    try:
        base = parse_config(cls, _default_args(cls))
    except Exception:  # noqa: BLE001 - a command whose required fields need more than a name: start from its defaults
        pytest.skip(f"{prog}: required fields need real values")
    nulled = []
    cfg = base
    for dotted in _optional_fields(base):  # set every optional non-None field to None, one at a time where valid
        try:
            cfg = parse_config(cls, [*_default_args(cls), *[f"--{d}" for n in nulled for d in (n, "None")],
                                     f"--{dotted}", "None"])  # fmt: skip
        except Exception:  # noqa: BLE001 - None refused by a validator for this field: leave it set
            continue
        nulled.append(dotted)
    if prog in ("rl", "trainer", "orchestrator", "sft"):  # these have None-able fields with other defaults
        assert nulled, f"{prog}: no optional field could be set to None"
    path = tmp_path / "resolved.toml"
    path.write_text(config_to_toml(cfg))
    assert parse_config(cls, ["@", str(path)]) == cfg
    assert parse_config(cls, ["@", str(path)]).model_dump() == cfg.model_dump()


def test_some_command_has_none_over_a_non_none_default():
    """The round trip above is not vacuous: the trainer has fields whose default is not None that it sets to None."""
    from prime_rl.config.trainer import TrainerConfig

    assert "optim.max_norm" in _optional_fields(TrainerConfig())


def test_the_reference_seed_config_writes_request_timeout_and_it_means_request_timeout_s(tmp_path):
    from prime_rl.config.rl import RLConfig

    assert "env.taskset.task.request_timeout = 600" in SEED.read_text()
    cfg = parse_config(RLConfig, ["@", str(SEED)])
    task = cfg.orchestrator.train.source[0].env.taskset.task
    assert task.request_timeout_s == 600.0
    new = tmp_path / "new.toml"
    new.write_text(SEED.read_text().replace("request_timeout = 600", "request_timeout_s = 45"))
    assert parse_config(RLConfig, ["@", str(new)]).orchestrator.train.source[0].env.taskset.task.request_timeout_s == 45
