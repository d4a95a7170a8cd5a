"""Fast `--help`: read each config class's field docstrings once, and only where a field needs them.

`prime-pydantic-config` (0.4.3) renders `--help` from the models and, for every sub-config panel, calls
`_extract_field_docstrings(cls)`, which runs `inspect.getsource` + `ast.parse` on *every* class of `cls.__mro__`,
pydantic's own `BaseModel` (about 1,800 lines) included, with no cache: `rl --help` walks 49 panels and parses
198 class sources, most of its run time. This module replaces that function with one that gives the same result:

1. a class whose fields all have `Field(description=...)` needs no docstrings (the description wins in
   `_field_description` and `_panel_description`), so nothing is read: every prime-rl field has a description
   (`tests/test_config_docs.py` checks it);
2. otherwise each base class is parsed once per process (`functools.cache`), and bases without fields of their own
   (`object`, pydantic's `BaseModel`) are skipped.

The upstream fix (offered to prime-pydantic-config): cache the per-class parse and skip classes that declare no
annotated fields of their own, or read docstrings through pydantic's `use_attribute_docstrings`, which does it once
at class creation. `install()` leaves the library untouched if the function is gone (a fixed release).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from typing import Any


@functools.cache
def _own_docstrings(base: type) -> dict[str, str]:
    """PEP 224 docstrings of the fields `base` itself declares (a string literal right after `name: T = ...`)."""
    if base is object or not base.__dict__.get("__annotations__"):
        return {}
    from pydantic import BaseModel

    if base is BaseModel:
        return {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
    except (OSError, TypeError, SyntaxError):
        return {}
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == base.__name__), None)
    if node is None:
        return {}
    out = {}
    for stmt, nxt in zip(node.body, node.body[1:], strict=False):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                out[stmt.target.id] = nxt.value.value.strip()
    return out


@functools.cache
def field_docstrings(cls: type) -> dict[str, str]:
    """`{field: docstring}` as `pydantic_config.cli._extract_field_docstrings` gives it (subclasses shadow bases),
    or `{}` when every field of `cls` has a description (then the docstrings are never shown)."""
    fields: dict[str, Any] = getattr(cls, "model_fields", {}) or {}
    if fields and all(f.description for f in fields.values()):
        return {}
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        out.update(_own_docstrings(base))
    return out


def library_reader():
    """The library's own `_extract_field_docstrings` (for comparison in tests), installed or not."""
    from prime_rl.config.upstream import library_docstring_reader

    return library_docstring_reader()


def install() -> None:
    """Swap the library's docstring reader for `field_docstrings` (idempotent; a no-op if the library changed;
    through `config.upstream`, the one module that touches the library's private parts)."""
    from prime_rl.config.upstream import replace_docstring_reader

    replace_docstring_reader(field_docstrings)
