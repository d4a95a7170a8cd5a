"""Layered `@` files: how a later file's lists meet an earlier file's.

`@ a.toml @ b.toml` deep-merges the files left to right: tables merge key by key, but a list (a list of tables such
as `[[orchestrator.train.source]]` included) is one value, so the later file's list replaces the earlier one whole.
`replaced_lists` names each list of tables a later file replaces, so that is never silent.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def root_files(argv: list[str]) -> list[str]:
    """The root-level `@ FILE` arguments of `argv`, in order (a section's `--x @ file` is not one)."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "@" and (i == 0 or not argv[i - 1].startswith("--"))]


def table_lists(node: Any, prefix: str = "") -> Iterator[tuple[str, list]]:
    """`(dotted path, list)` of every non-empty list of tables in the TOML tree `node` (not looking inside lists)."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            yield path, value
        elif isinstance(value, dict):
            yield from table_lists(value, path + ".")


def replaced_lists(argv: list[str]) -> list[str]:
    """One line per list of tables that a later root-level `@` file of `argv` sets after an earlier one did:
    `orchestrator.train.source from b.toml replaces the 2 entries of a.toml (...)`. Unreadable files are skipped
    (the parser names them)."""
    seen: dict[str, tuple[str, int]] = {}
    out = []
    for file in root_files(argv):
        try:
            with open(Path(file).expanduser(), "rb") as f:
                tree = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError):
            continue
        for path, items in table_lists(tree):
            if path in seen:
                before, count = seen[path]
                entries = "entry" if count == 1 else "entries"
                out.append(
                    f"{path} from {file} replaces the {count} {entries} of {before} (lists replace, tables merge: "
                    f"repeat in {file} the entries of {before} to keep, or give the list in one file only)"
                )
            seen[path] = (file, len(items))
    return out
