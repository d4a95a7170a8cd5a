"""config/upstream.py is the one module that uses private parts of prime-pydantic-config: the names it uses exist
with the parameters it expects (an upgrade that changes them fails here, not in a user's `--help`), and no other
module reaches into the library's private names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from prime_rl.config import upstream

SRC = Path(__file__).resolve().parents[1] / "src" / "prime_rl"


def test_the_private_names_exist_with_the_expected_parameters():
    assert upstream.upstream_problems() == []


def test_the_check_fails_when_upstream_changes(monkeypatch):
    lib = importlib.import_module("pydantic_config.cli")
    monkeypatch.delattr(lib, "_nest_config")
    monkeypatch.setattr(lib, "_deep_merge", lambda base, override, strict=False: base)
    problems = upstream.upstream_problems()
    assert "pydantic_config.cli._nest_config is gone" in problems
    assert any(p.startswith("pydantic_config.cli._deep_merge('base', 'override', 'strict')") for p in problems)


def test_the_check_fails_when_the_replaced_validator_is_renamed(monkeypatch):
    """`config.base.BaseConfig` replaces the library's "None" -> None validator by its name; were it renamed, the
    library's would run too and turn a text field's "None" into None again."""
    from pydantic_config import BaseConfig as LibBaseConfig

    validators = LibBaseConfig.__pydantic_decorators__.model_validators
    monkeypatch.setitem(validators, "_none_to_null", validators["_none_str_to_none"])
    monkeypatch.delitem(validators, "_none_str_to_none")
    assert "pydantic_config.BaseConfig has no validator _none_str_to_none" in upstream.upstream_problems()


def test_the_adapter_works_on_a_real_config(tmp_path):
    from prime_rl.config.orchestrator import OrchestratorConfig

    rows, panels = upstream.collect_help_panels(OrchestratorConfig)
    assert any(flag.startswith("--batch-size") for flag, _, _ in rows) and panels
    assert "train.source" in upstream.json_value_field_paths(OrchestratorConfig)
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text("seed = 1\n[train]\ngroup_size = 4\n")
    b.write_text("[train]\ngroup_size = 2\n")
    assert upstream.merged_args(["@", str(a), "@", str(b)]) == {"seed": 1, "train": {"group_size": 2}}


def test_no_other_module_uses_the_librarys_private_names():
    bad = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "config" / "upstream.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pydantic_config"):
                bad += [f"{path.relative_to(SRC)} imports {a.name}" for a in node.names if a.name.startswith("_")]
                if node.module == "pydantic_config.cli":
                    bad.append(f"{path.relative_to(SRC)} imports from pydantic_config.cli")
            if isinstance(node, ast.Constant) and node.value == "pydantic_config.cli":
                bad.append(f"{path.relative_to(SRC)} loads pydantic_config.cli")
    assert not bad, bad


def test_list_flags_inside_an_optional_section(tmp_path):
    """`sft`'s `[eval]` is optional (`EvalConfig | None`); the library walked plain sections only, so an indexed flag
    into `eval.source` was refused and a whole-list `--eval.source JSON` taken as a string."""
    import json

    from prime_rl.config.loader import parse_config
    from prime_rl.config.trainer import SFTConfig

    f = tmp_path / "sft.toml"
    f.write_text('[eval]\ninterval = 2\n[[eval.source]]\nname = "a"\nenv.id = "reverse-text"\n'
                 '[inference]\n')  # fmt: skip
    cfg = parse_config(SFTConfig, ["@", str(f), "--eval.source.0.name", "b", "--output-dir", str(tmp_path / "o")])
    assert [s.name for s in cfg.eval.source] == ["b"]
    whole = json.dumps([{"name": "c", "env": {"id": "reverse-text"}}, {"name": "d", "env": {"id": "gridsim"}}])
    cfg = parse_config(SFTConfig, ["@", str(f), "--eval.source", whole, "--output-dir", str(tmp_path / "o")])
    assert [s.name for s in cfg.eval.source] == ["c", "d"]
