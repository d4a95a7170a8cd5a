"""The module rules of docs/design.md ("Module layout"), checked on the source text: which part may import
which, no heavy imports in config/cli, small files, and no import circles in the module graph (function-level
imports included, since those are how a circle hides)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "prime_rl"

# part -> parts of prime_rl it must never import (docs/design.md: trainer and orchestrator meet only in transport/
# and the run directory; config, envs, transport, models and inference know nothing of the processes that use them)
FORBIDDEN = {
    "trainer": {"orchestrator", "launcher", "inference", "envs"},
    "orchestrator": {"trainer", "launcher"},
    "config": {"trainer", "orchestrator", "inference", "envs", "launcher", "models", "cli", "monitor"},
    "envs": {"trainer", "orchestrator", "inference", "launcher"},
    "transport": {"trainer", "orchestrator", "inference", "envs", "launcher"},
    "models": {"trainer", "orchestrator", "inference", "envs", "launcher"},
    "inference": {"trainer", "orchestrator", "envs", "launcher"},
}
HEAVY = {"torch", "vllm", "transformers", "peft"}
# shared top-level modules (src/prime_rl/<name>.py) that every part may use; they use no part themselves
SHARED = {"registry", "ports", "process", "dates"}
# thin entry points: parse a config, then hand over by import path (prime_rl.cli.command.load_impl)
CLI_MAY_IMPORT = {"config", "cli", "registry"}


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


def _dynamic_imports(path: Path) -> set[str]:
    """Module names passed as text to `importlib.import_module` / `import_path` (an f-string's leading text)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func not in ("import_module", "import_path"):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
            arg = arg.values[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            out.add(arg.value.split(":")[0])
    return out


def test_config_imports_neither_entry_points_nor_monitor(tmp_path):
    """config/ sits below every process: it imports no `cli` (entry points) or `monitor` module, statically or by
    import path; a tool that walks the commands (the docs/config.md generator) lives in cli/."""
    bad = [f"{p.relative_to(SRC)} imports {mod}" for p in (SRC / "config").rglob("*.py")
           for mod in _imports(p) | _dynamic_imports(p)
           if mod.startswith(("prime_rl.cli", "prime_rl.monitor"))]  # fmt: skip
    assert not bad, "\n".join(bad)
    probe = tmp_path / "probe.py"  # the checker sees an import hidden in an f-string
    probe.write_text('import importlib\nimportlib.import_module(f"prime_rl.cli.{1}")\n')
    assert _dynamic_imports(probe) == {"prime_rl.cli."}


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


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The prime_rl module an imported name lives in: `a.b.c` itself, else its longest module prefix."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """module -> prime_rl modules it imports, from every import statement anywhere in the file (module level,
    function level, `TYPE_CHECKING` blocks). `from pkg import sub` counts `pkg.sub` when that is a module."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            for name in names:
                target = _resolve(name, modules) if name.startswith("prime_rl") else None
                if target is not None and target != mod:
                    out.add(target)
        graph[mod] = out
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan 1972), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circle_finder_finds_hidden_circles():
    """The checker itself, on a hand-made graph: a 3-module loop and a 2-module loop are found, a chain is not."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}, "f": {"a"}}
    assert sorted(import_circles(g)) == [["a", "b", "c"], ["d", "e"]]
    graph = import_graph()  # and the real graph sees function-level imports
    assert "prime_rl.envs.gridsim.baselines" in graph["prime_rl.envs.gridsim.cli"]  # imported inside a function


def test_no_import_circles():
    circles = import_circles(import_graph())
    assert not circles, "import circles (function-level imports included):\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_shared_modules_and_entry_points_stay_light():
    """Shared top-level modules use no part of prime-rl; the cli imports only config, cli and registry (the rest by
    import path after parsing); the orchestrator reaches inference only through its backend seam."""
    bad = []
    for mod, targets in import_graph().items():
        bits = mod.split(".")
        for t in targets:
            tb = t.split(".")
            if len(tb) < 2:
                continue  # `from prime_rl import sub`: the package itself (its submodule is a target of its own)
            if len(bits) == 2 and bits[1] in SHARED and tb[1] not in SHARED:
                bad.append(f"{mod} (shared) imports {t}")
            if bits[1] == "cli" and tb[1] not in CLI_MAY_IMPORT:
                bad.append(f"{mod} (entry point) imports {t}")
            if bits[1] == "orchestrator" and tb[1] == "inference" and t != "prime_rl.inference.backend":
                bad.append(f"{mod} imports {t}: use prime_rl.inference.backend (the BACKENDS registry)")
    assert not bad, "\n".join(bad)

