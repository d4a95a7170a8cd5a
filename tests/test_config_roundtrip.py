"""Resolved configs: every command's config written as TOML (`config_to_toml`) reads back equal, None fields
included (a None whose default is None is left out; any other is named in its section's `_null` list), with no
`"None"` text in the file, and a text field holding "None" reads back as that text; the configs a dry run writes for
each process of the example runs read back equal; and the reference's older field names (seconds without `_s`)
still parse."""

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
    assert '"None"' not in path.read_text()
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


def test_a_text_field_holding_none_stays_text(tmp_path):
    """ "None" is null only for a field that admits None: `model.name` and `wandb.project` (text, never None) keep it
    as text from a file, a flag and a resolved config, where the config library turned it into None (and refused)."""
    from prime_rl.config.trainer import TrainerConfig

    src = tmp_path / "in.toml"
    src.write_text('[model]\nname = "None"\n[wandb]\nproject = "None"\n')
    cfg = parse_config(TrainerConfig, ["@", str(src), "--optim.max-norm", "None"])
    assert cfg.model.name == "None" and cfg.wandb.project == "None" and cfg.optim.max_norm is None
    assert parse_config(TrainerConfig, ["--model.name", "None"]).model.name == "None"
    out = tmp_path / "out.toml"
    out.write_text(config_to_toml(cfg))
    assert 'name = "None"' in out.read_text() and '_null = [\n    "max_norm",\n]' in out.read_text()
    assert parse_config(TrainerConfig, ["@", str(out)]) == cfg


def test_the_null_list_names_fields_that_admit_none(tmp_path):
    from prime_rl.config.loader import ConfigError
    from prime_rl.config.trainer import TrainerConfig

    for body, why in (('[optim]\n_null = ["max_nrom"]\n', "'max_nrom': no field of this section"),
                      ('[optim]\n_null = ["lr"]\n', "'lr': a field that cannot be None"),
                      ('[optim]\n_null = "max_norm"\n', "expected a list of field names")):  # fmt: skip
        path = tmp_path / "bad.toml"
        path.write_text(body)
        with pytest.raises(ConfigError, match=why):
            parse_config(TrainerConfig, ["@", str(path)])
    path = tmp_path / "later.toml"
    path.write_text('[optim]\n_null = ["max_norm"]\n')
    assert parse_config(TrainerConfig, ["@", str(path)]).optim.max_norm is None
    assert parse_config(TrainerConfig, ["@", str(path), "--optim.max-norm", "2"]).optim.max_norm == 2.0


EXAMPLE_RUNS = ["reverse_text/rl.toml", "ladder/digit.toml", "gridsim/rl.toml"]


@pytest.mark.parametrize("rel", EXAMPLE_RUNS)
def test_the_configs_a_dry_run_writes_read_back_equal(rel, tmp_path):
    """`resolve` + `write_configs` (what `rl --dry-run` does) on example runs with the tiny model: each process's
    written config, parsed with its command's config class, equals the resolved config object; no file holds the
    text "None" (reverse_text sets inference.vllm.tool_call_parser = "None" over the default "hermes")."""
    import json

    from prime_rl.launcher.layout import Layout
    from prime_rl.launcher.plan import resolve, write_configs
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    args = ["@", str(REPO / "examples" / rel), "--model.name", str(cached_tiny_model()),
            "--output-dir", str(tmp_path / "run"), "--inference.server.port", str(free_port())]  # fmt: skip
    if rel.startswith("gridsim"):  # rows of the nemo-gym source under tmp, at a free port rl would start
        rows = tmp_path / "gym/resources_servers/gridsim_v1/data/train.jsonl"
        rows.parent.mkdir(parents=True)
        row = {"task_id": "t0", "responses_create_params": {"input": [{"role": "user", "content": "Plan."}]}}
        rows.write_text(json.dumps(row) + "\n")
        (rows.parent / "eval.jsonl").write_text(json.dumps({**row, "task_id": "e0"}) + "\n")
        source = [{"name": "gridsim", "env": {"taskset": {"id": "nemo-gym", "dataset": str(rows), "task": {
            "resources_url": f"http://127.0.0.1:{free_port()}"}}, "agent": {"max_turns": 4}}}]
        args += ["--orchestrator.train.source", json.dumps(source)]
    from prime_rl.config.rl import RLConfig

    plan = resolve(parse_config(RLConfig, args), Layout.single(), probe=lambda url: False, gpus=[])
    paths = write_configs(plan)
    assert {"rl", "trainer", "orchestrator"} <= set(paths)
    for name, path in paths.items():
        text = path.read_text()
        assert '"None"' not in text, name
        resolved = plan.configs[name]
        assert parse_config(type(resolved), ["@", str(path)]) == resolved, name
    if rel.startswith("reverse_text"):
        assert plan.configs["inference"].vllm.tool_call_parser is None
        assert '_null = [\n    "tool_call_parser",\n]' in paths["inference"].read_text()
