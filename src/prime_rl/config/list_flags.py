"""Indexed flags into a list of sections: `--eval.source.0.env.agent.max-turns 2`.

A list of sections (`[[eval.source]]` tables) is given whole, in an `@` file or as JSON
(`--eval.source '[{"name": "a", ...}]'`). An indexed flag changes one field of one item an `@` file gave:
`--LIST.N.FIELD VALUE`, items counted from 0. `expand_indexed_flags` reads the `@` files as the loader does, applies
every indexed flag to a copy of its list and hands the loader the whole list as one JSON flag, so precedence stays
defaults < files < flags and the model's validators see the list as if the file had held the new value.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


class ListFlagError(ValueError):
    """An indexed flag that cannot apply (no such list field, no items in the files, index out of range)."""


def is_indexed(flag: str) -> bool:
    """Whether `--a.b.0.c` (or `--a.b.0.c=v`) has an integer segment."""
    return flag.startswith("--") and any(s.isdigit() for s in flag[2:].split("=", 1)[0].split("."))


def config_files(argv: list[str]) -> list[str]:
    """The files given as `@ FILE` (root level) or `--section @ FILE` / `--section @FILE`, in order."""
    out = []
    for i, a in enumerate(argv):
        if a == "@" and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith("@") and len(a) > 1 and i > 0 and argv[i - 1].startswith("--"):
            out.append(a[1:])
    return out


def expand_indexed_flags(cls: type[BaseModel], args: list[str]) -> list[str]:
    """`args` with each `--LIST.N.FIELD VALUE` replaced by one `--LIST JSON` flag holding the whole list (the `@`
    files' items with every indexed change applied); `args` unchanged when it has no indexed flag.

    Raises:
        ListFlagError: the part before the index is not a list field of `cls`, no `@` file gives that list, or
            the index is past its end (the message names the flag, the file and the syntax that works).
    """
    if not any(is_indexed(a) for a in args):
        return args
    from prime_rl.config.upstream import json_value_field_paths, merged_args

    merged = merged_args(args)
    files = ", ".join(config_files(args)) or "no @ file"
    list_paths = json_value_field_paths(cls)
    lists: dict[str, list[Any]] = {}
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if not is_indexed(tok) or (i > 0 and args[i - 1] == "@"):
            out.append(tok)
            i += 1
            continue
        flag, eq, value = tok.partition("=")
        i += 1
        if not eq:
            if i < len(args) and not args[i].startswith("--") and args[i] != "@":
                value, i = args[i], i + 1
            else:
                value = "true"  # a bare boolean flag
        segs = flag[2:].split(".")
        k = next(j for j, s in enumerate(segs) if s.isdigit())
        list_path = ".".join(segs[:k])
        dotted = list_path.replace("-", "_")
        if list_path not in list_paths:
            raise ListFlagError(f"{flag}: `{dotted}` is not a list of sections, so `.{segs[k]}.` cannot index it; "
                                f"{_list_fields_hint(list_paths, segs[:k])}")  # fmt: skip
        if list_path not in lists:
            node: Any = merged
            for s in segs[:k]:
                node = node.get(s.replace("-", "_")) if isinstance(node, dict) else None
            if not isinstance(node, list) or not node:
                raise ListFlagError(
                    f"{flag}: no @ file gives items of `{dotted}` ({files}), so item {segs[k]} does not exist; "
                    f"add them to a file as [[{dotted}]] tables, or give the whole list: --{list_path} '[{{...}}]'"
                )
            lists[list_path] = json.loads(json.dumps(node, default=str))  # a deep copy, TOML dates as text
        items = lists[list_path]
        index = int(segs[k])
        if index >= len(items):
            raise ListFlagError(f"{flag}: `{dotted}` has {len(items)} item(s) (from {files}), counted from 0; "
                                f"index {index} is past the end")  # fmt: skip
        _set(items, [int(s) if s.isdigit() else s.replace("-", "_") for s in segs[k:]], value, flag)
    for list_path, items in lists.items():
        out += [f"--{list_path}", json.dumps(items)]
    return out


def _list_fields_hint(list_paths: set[str], prefix: list[str]) -> str:
    """The list fields under the same section, as the fix of an index on a field that is not a list."""
    head = ".".join(prefix[:-1])
    near = sorted(p for p in list_paths if p.startswith(head + ".") or not head)[:5]
    if not near:
        return "this config has no list of sections there"
    return "list fields there: " + ", ".join(f"--{p}.N.FIELD" for p in near)


def _set(node: Any, path: list[int | str], value: str, flag: str) -> None:
    for j, seg in enumerate(path[:-1]):
        nxt = path[j + 1]
        if isinstance(seg, int):
            if not isinstance(node, list) or seg >= len(node):
                raise ListFlagError(f"{flag}: no item {seg} there in the @ files")
            node = node[seg]
        else:
            if not isinstance(node, dict):
                raise ListFlagError(f"{flag}: `{seg}` is inside a value that is not a section")
            node = node.setdefault(seg, [] if isinstance(nxt, int) else {})
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise ListFlagError(f"{flag}: no item {last} there in the @ files")
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ListFlagError(f"{flag}: `{last}` is inside a value that is not a section")
