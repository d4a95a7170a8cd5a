"""Booleans are booleans: text or a number given for a boolean field is refused, not read as true or false.

pydantic's lax mode reads `"yes"`, `"on"`, `"1"` and `1` as true, so `offline = "false"` in a TOML file would be
accepted as false and `offline = "no"` too, while TOML has real booleans (`offline = false`). `file_bool_problems`
refuses a boolean field set to anything but `true`/`false` (or the text `"None"` where the field admits None) in an
`@` file, naming the key, the file and the fix. On the command line a boolean flag takes true or false (any case)
or no value (`config.argv.bind_args`), and `config.base.BaseConfig` refuses any other text or number that reaches a
boolean field (`base.not_a_bool`: a JSON flag's value; the text true/false of a flag passes).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from prime_rl.config.argv import models_in
from prime_rl.config.base import NONE_TEXT, bool_field, not_a_bool
from prime_rl.config.suggest import dotted


def file_bool_problems(cls: type, argv: list[str]) -> list[str]:
    """One line per boolean field that an `@` TOML file of `argv` (the command line as `argv.bind_args` returns it:
    `@ FILE` at the root, `--section @ FILE` or `--section @FILE` under a section) sets to text or a number:
    `  a.b = "yes" (in FILE): ...` with the fix `b = true` / `b = false`. Files that cannot be read are left to the
    loader, which reports them."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        nested = i > 0 and argv[i - 1].startswith("--")
        if arg == "@" and i + 1 < len(argv):
            file = argv[i + 1]
        elif arg.startswith("@") and len(arg) > 1 and nested:
            file = arg[1:]
        else:
            continue
        if not file.endswith(".toml"):
            continue
        try:
            with open(Path(file).expanduser(), "rb") as f:
                table = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError):
            continue
        prefix = tuple(argv[i - 1][2:].replace("-", "_").split(".")) if nested else ()
        annotation: Any = cls
        for key in prefix:
            annotation = _field_annotation(annotation, key)
        for path, value in _walk(annotation, table, prefix):
            key = path[-1]
            what = "text" if isinstance(value, str) else "a number"
            shown = f'"{value}"' if isinstance(value, str) else repr(value)
            out.append(f"  {dotted(path)} = {shown} (in {file}): {what}, not a boolean; TOML writes a boolean "
                       f"without quotes: {key} = true or {key} = false")  # fmt: skip
    return out


def _field_annotation(annotation: Any, key: str) -> Any:
    """The annotation of field `key` in the sections `annotation` holds, when every section that has it agrees
    (a union's variants); None when none has it."""
    found = [m.model_fields[key].annotation for m in models_in(annotation) if key in m.model_fields]
    return found[0] if found and all(a == found[0] for a in found) else None


def _walk(annotation: Any, node: Any, path: tuple) -> list[tuple[tuple, Any]]:
    """(path, value) of every boolean field under the TOML table `node` (of the section type `annotation`) whose
    value is not a boolean; lists of tables walked item by item."""
    found: list[tuple[tuple, Any]] = []
    if isinstance(node, list):
        for index, item in enumerate(node):
            found += _walk(annotation, item, path + (index,))
        return found
    if not isinstance(node, dict) or annotation is None:
        return found
    for key, value in node.items():
        field = _field_annotation(annotation, key)
        if field is None:
            continue
        if not_a_bool(field, value) or (isinstance(value, str) and bool_field(field)[0] and value != NONE_TEXT):
            found.append((path + (key,), value))
        elif isinstance(value, dict | list):
            found += _walk(field, value, path + (key,))
    return found
