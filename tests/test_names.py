"""No single-letter names in src/prime_rl outside comprehensions and lambdas: a name says what it holds (`row`,
`count`, `path`, not `r`, `n`, `p`). Conventions that read as well as a word are allowed everywhere:

- `_`: a value thrown away;
- `e`: the exception of an `except ... as e` handler (its scope is the handler);
- `f`: the file of a `with open(...) as f` block;
- `i`, `j`: the index of a `for` loop;
- `T`: a module's `TypeVar`.

The names written before this rule held are listed in `tests/single_letter_names.txt` as `file function name`
lines; the list only shrinks: a new single-letter name fails `test_no_new_single_letter_names`, and a listed one
that is gone (renamed) fails `test_the_allow_list_names_only_what_is_still_there` until its line is removed.
`python tests/test_names.py --write` rewrites the list from the source (after renaming, never to add names).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "prime_rl"
ALLOW_LIST = Path(__file__).with_name("single_letter_names.txt")
SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


def _targets(node: ast.AST) -> Iterator[str]:
    """The names a binding target binds (`a`, `a, (b, *c)`; attributes and subscripts bind none)."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Tuple | ast.List):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def _is_typevar(node: ast.Assign) -> bool:
    call = node.value
    return isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "TypeVar"


def bindings(tree: ast.Module) -> Iterator[tuple[str, str, int]]:
    """(enclosing function or "<module>", single-letter name, line) for each name bound outside comprehensions and
    lambdas that the conventions above do not allow."""

    def visit(node: ast.AST, func: str) -> Iterator[tuple[str, str, int]]:
        if isinstance(node, SCOPES):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            spec = node.args
            params = [*spec.posonlyargs, *spec.args, *spec.kwonlyargs, spec.vararg, spec.kwarg]
            for param in params:
                if param is not None and len(param.arg) == 1 and param.arg != "_":
                    yield node.name, param.arg, node.lineno
            for decorator in node.decorator_list:
                yield from visit(decorator, func)
            for child in node.body:
                yield from visit(child, node.name)
            return
        names: list[str] = []
        if isinstance(node, ast.Assign) and not _is_typevar(node):
            names = [name for target in node.targets for name in _targets(target)]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            names = list(_targets(node.target))
        elif isinstance(node, ast.For | ast.AsyncFor):
            names = [name for name in _targets(node.target) if name not in ("i", "j")]
        elif isinstance(node, ast.With | ast.AsyncWith):
            names = [name for item in node.items if item.optional_vars is not None
                     for name in _targets(item.optional_vars) if name != "f"]  # fmt: skip
        elif isinstance(node, ast.ExceptHandler) and node.name not in (None, "e"):
            names = [node.name]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [(alias.asname or alias.name).split(".")[0] for alias in node.names]
        for name in names:
            if len(name) == 1 and name != "_":
                yield func, name, node.lineno
        for child in ast.iter_child_nodes(node):
            yield from visit(child, func)

    for child in tree.body:
        yield from visit(child, "<module>")


def found() -> dict[tuple[str, str, str], int]:
    """(file under src/prime_rl, function, name) -> the first line binding it, over every module."""
    out: dict[tuple[str, str, str], int] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for func, name, line in bindings(ast.parse(path.read_text(), str(path))):
            out.setdefault((rel, func, name), line)
    return out


def allowed() -> set[tuple[str, str, str]]:
    lines = [line.split() for line in ALLOW_LIST.read_text().splitlines() if line and not line.startswith("#")]
    return {(rel, func, name) for rel, func, name in lines}


def test_no_new_single_letter_names():
    new = {key: line for key, line in found().items() if key not in allowed()}
    assert not new, "single-letter names (name what the value holds; see this test's docstring for the few " \
        "allowed conventions):\n" + "\n".join(f"  src/prime_rl/{rel}:{line} in {func}: {name}"
                                              for (rel, func, name), line in sorted(new.items()))  # fmt: skip


def test_the_allow_list_names_only_what_is_still_there():
    gone = sorted(allowed() - set(found()))
    assert not gone, f"renamed, remove from {ALLOW_LIST.name}:\n" + "\n".join("  " + " ".join(key) for key in gone)


def test_the_check_sees_each_kind_of_binding_and_skips_the_conventions():
    source = '''
T = TypeVar("T")
n = 1
def fn(a, b=2, *c, **d):
    for i, (k, _) in enumerate(pairs):
        m: int = i
        m += 1
    with open(path) as f, lock as g:
        pass
    try:
        pass
    except ValueError as e:
        pass
    except KeyError as z:
        pass
    if (w := size) > [v for v in range(3)][0]:
        return lambda q: q
'''
    got = sorted((func, name) for func, name, _ in bindings(ast.parse(source)))
    assert got == [("<module>", "n"), ("fn", "a"), ("fn", "b"), ("fn", "c"), ("fn", "d"), ("fn", "g"), ("fn", "k"),
                   ("fn", "m"), ("fn", "m"), ("fn", "w"), ("fn", "z")]  # fmt: skip


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    keys = sorted(found())
    ALLOW_LIST.write_text("# file (under src/prime_rl) function name: single-letter names still to rename; only "
                          "shrinks (tests/test_names.py)\n" + "".join(" ".join(key) + "\n" for key in keys))
    print(f"{ALLOW_LIST}: {len(keys)} entries")
