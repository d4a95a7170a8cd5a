"""The one place prime-rl uses private parts of `prime-pydantic-config` (`pydantic_config.cli`).

The library parses `@ file` arguments and flags and renders `--help`; prime-rl builds on pieces it does not export:
the help panels (`config.help`: one-screen help, variant sections), the argument merge (`config.list_flags`:
`--list.N.field` flags) and the field-docstring reader it replaces with a cached one (`config.fast_help`). Every
such use goes through this module; `PRIVATE` lists the names and their parameters, and
`tests/test_config_upstream.py` fails when an upgrade of the library removes one or changes its parameters.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

PRIVATE: dict[str, tuple[str, ...]] = {
    "_collect_help_panels": ("cls", "prefix"),
    "_render_panel": ("title", "rows", "term_width", "min_flag_w"),
    "_term_width": ("wide",),
    "_deep_merge": ("base", "override"),
    "_find_json_value_field_paths": ("cls", "prefix"),
    "_nest_config": ("key_path", "config"),
    "_process_args": ("args",),
    "_extract_field_docstrings": ("cls",),
    "_is_json_value_field": ("annotation",),
}
"""Private functions of `pydantic_config.cli` used here -> their parameter names (prime-pydantic-config 0.4.x)."""

REPLACED_VALIDATORS = ("_none_str_to_none",)
"""Model validators of the library's `BaseConfig` that `config.base.BaseConfig` replaces by defining one of the same
name (the library's turns the text "None" into None in every field; prime-rl's only where None is allowed). Under
another name the library's would run as well."""


def _lib() -> Any:
    # `import pydantic_config.cli` would give the `cli` function, which the package re-exports under that name
    return importlib.import_module("pydantic_config.cli")


def upstream_problems() -> list[str]:
    """What no longer matches `PRIVATE` in the installed library: a missing name, or other parameter names."""
    lib, out = _lib(), []
    for name, params in PRIVATE.items():
        fn = getattr(lib, name, None)
        if fn is None:
            out.append(f"pydantic_config.cli.{name} is gone")
            continue
        if name in LIBRARY_ORIGINALS and fn.__module__ != lib.__name__:
            fn = LIBRARY_ORIGINALS[name]  # the library's own, where this module replaced it
        elif name == "_extract_field_docstrings" and fn.__module__ != lib.__name__:
            fn = LIBRARY_READER.get("reader") or fn  # the library's own, where fast_help replaced it
        got = tuple(inspect.signature(fn).parameters)
        if got != params:
            out.append(f"pydantic_config.cli.{name}{got} (expected parameters {params})")
    validators = lib.BaseConfig.__pydantic_decorators__.model_validators
    out += [f"pydantic_config.BaseConfig has no validator {name}" for name in REPLACED_VALIDATORS if name not in validators]
    return out


def collect_help_panels(cls: type, prefix: str = "") -> tuple[list[Any], list[Any]]:
    """(rows, sub-panels) of `cls`'s `--help`: rows are (flag, description, default) tuples, panels (title, rows)."""
    return _lib()._collect_help_panels(cls, prefix)


def render_panel(title: str, rows: list[Any], term_width: int) -> list[str]:
    """The lines of one boxed `--help` panel."""
    return _lib()._render_panel(title, rows, term_width)


def term_width(wide: bool = True) -> int:
    """The terminal width `--help` wraps to."""
    return _lib()._term_width(wide)


def merged_args(args: list[str]) -> dict:
    """The config that the `@ file` arguments of `args` give (deep-merged left to right, nested `--x @ f` files
    under their key), before the flags and validation."""
    lib = _lib()
    _, merged, nested = lib._process_args(args)
    for key_path, loaded in nested.items():
        merged = lib._deep_merge(merged, lib._nest_config(key_path, loaded))
    return merged


def json_value_field_paths(cls: type) -> set[str]:
    """Dotted paths of the fields of `cls` the library takes as JSON on the command line (lists of sections),
    sections that may be None (`eval: EvalConfig | None`) and variants of a union included."""
    install_json_paths()
    return _lib()._find_json_value_field_paths(cls)


LIBRARY_ORIGINALS: dict[str, Callable[..., Any]] = {}
"""The library's own functions that this module replaced, by name."""


def _models_in(annotation: Any) -> list[type]:
    """The pydantic models an annotation holds: itself, or the members of an `Annotated`/`Optional`/union."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if hasattr(annotation, "__metadata__"):  # Annotated[X, ...]
        return _models_in(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _is_tuple(annotation: Any) -> bool:
    """Whether a field holds a tuple (`tuple[float, float]`, optional or not)."""
    return typing.get_origin(annotation) is tuple or any(typing.get_origin(a) is tuple
                                                         for a in typing.get_args(annotation))  # fmt: skip


def _json_value_field_paths(cls: type, prefix: str = "") -> set[str]:
    """The library's `_find_json_value_field_paths`, also walking into sections that may be None and into union
    variants (the library walks plain model fields only, so `--eval.source '[...]'` of an optional `[eval]` was
    taken as a string), with tuple fields (`--orchestrator.reward-range '[-1, 1]'`; `loader.bind_args` hands
    `--orchestrator.reward-range -1 1` on in that form)."""
    is_json = LIBRARY_ORIGINALS.get("_is_json_value_field") or _lib()._is_json_value_field
    paths: set[str] = set()
    for name, info in getattr(cls, "model_fields", {}).items():
        full = f"{prefix}.{name.replace('_', '-')}" if prefix else name.replace("_", "-")
        if is_json(info.annotation) or _is_tuple(info.annotation):
            paths.add(full)
        for model in _models_in(info.annotation):
            if model is not cls:
                paths |= _json_value_field_paths(model, full)
    return paths


def install_json_paths() -> None:
    """Make the library's argument parser find list fields inside optional sections and union variants
    (idempotent)."""
    lib = _lib()
    if lib._find_json_value_field_paths is not _json_value_field_paths:
        LIBRARY_ORIGINALS.setdefault("_find_json_value_field_paths", lib._find_json_value_field_paths)
        lib._find_json_value_field_paths = _json_value_field_paths


LIBRARY_READER: dict[str, Callable[[type], dict[str, str]]] = {}
"""The library's own field-docstring reader, kept once `replace_docstring_reader` swapped it."""


def library_docstring_reader() -> Callable[[type], dict[str, str]] | None:
    """The library's own `_extract_field_docstrings`, replaced or not (None where a release removed it)."""
    return LIBRARY_READER.get("reader") or getattr(_lib(), "_extract_field_docstrings", None)


def replace_docstring_reader(reader: Callable[[type], dict[str, str]]) -> bool:
    """Make the library's `--help` read field docstrings with `reader` (idempotent). Returns False, changing
    nothing, where the library has no such function (a release that fixed its slow reader)."""
    lib = _lib()
    current = getattr(lib, "_extract_field_docstrings", None)
    if current is None:
        return False
    if current is not reader:
        LIBRARY_READER.setdefault("reader", current)
        lib._extract_field_docstrings = reader
    return True
