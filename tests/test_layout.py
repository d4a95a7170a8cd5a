"""The house plan's module rules (DESIGN.md, "Module layout"), checked on the source text."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "prime_rl"

# part -> parts of prime_rl it must never import (DESIGN: trainer and orchestrator meet only in transport/ and the
# run directory; config, envs, transport, models and inference know nothing of the processes that use them)
FORBIDDEN = {
    "trainer": {"orchestrator", "launcher", "inference", "envs"},
    "orchestrator": {"trainer", "launcher"},
    "config": {"trainer", "orchestrator", "inference", "envs", "launcher", "models"},
    "envs": {"trainer", "orchestrator", "inference", "launcher"},
    "transport": {"trainer", "orchestrator", "inference", "envs", "launcher"},
    "models": {"trainer", "orchestrator", "inference", "envs", "launcher"},
    "inference": {"trainer", "orchestrator", "envs", "launcher"},
}
HEAVY = {"torch", "vllm", "transformers", "peft"}


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_parts_do_not_import_forbidden_parts():
    bad = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        part = rel.parts[0] if len(rel.parts) > 1 else None
        for mod in _imports(path):
            bits = mod.split(".")
            if bits[0] == "prime_rl" and len(bits) > 1 and bits[1] in FORBIDDEN.get(part, set()):
                bad.append(f"{rel} imports {mod}")
    assert not bad, "\n".join(bad)


def test_config_and_cli_import_nothing_heavy_at_module_level():
    bad = []
    for folder in ("config", "cli"):
        for path in (SRC / folder).rglob("*.py"):
            for mod in _imports(path, top_level_only=True):
                if mod.split(".")[0] in HEAVY:
                    bad.append(f"{path.relative_to(SRC)} imports {mod} at module level")
    assert not bad, "\n".join(bad)


def test_files_stay_small():
    big = [f"{p.relative_to(SRC)}: {n} lines" for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500]
    assert not big, big
