"""Indexed flags into a list of sections: `--eval.source.0.env.agent.max-turns 2`.

A list of sections (`[[eval.source]]` tables) is given whole, in an `@` file or as JSON
(`--eval.source '[{"name": "a", ...}]'`). An indexed flag changes one field of one item an `@` file or that JSON flag
gave: `--LIST.N.FIELD VALUE` (or `--LIST[N].FIELD VALUE`, read so by `argv.bind_args`), items counted from 0; a
list, tuple or dict field takes one JSON value there. `expand_indexed_flags` reads the `@` files as the loader does (or
the list's JSON flag, which replaces the files' list), applies every indexed flag to a copy of the list and hands the
loader the whole list as one JSON flag, so precedence stays defaults < files < flags and the model's validators see
the list as if the file had held the new value.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from prime_rl.config.argv import flag_kind


class ListFlagError(ValueError):
    """An indexed flag that cannot apply (no such list field, no items in the files, index out of range)."""


def is_indexed(flag: str) -> bool:
    """Whether `--a.b.0.c` (or `--a.b.0.c=v`) has an integer segment."""
    return flag.startswith("--") and any(s.isdigit() for s in flag[2:].split("=", 1)[0].split("."))


def config_files(argv: list[str]) -> list[str]:
    """The files given as `@ FILE` (root level) or `--section @ FILE` / `--section @FILE`, in order."""
    out = []
    for i, arg in enumerate(argv):
        if arg == "@" and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith("@") and len(arg) > 1 and i > 0 and argv[i - 1].startswith("--"):
            out.append(arg[1:])
    return out


def expand_indexed_flags(cls: type[BaseModel], args: list[str]) -> list[str]:
    """`args` with each `--LIST.N.FIELD VALUE` replaced by one `--LIST JSON` flag holding the whole list (the `@`
    files' items, or those of the list's own JSON flag, with every indexed change applied); `args` unchanged when
    it has no indexed flag.

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
    pos = 0
    while pos < len(args):
        tok = args[pos]
        if not is_indexed(tok) or (pos > 0 and args[pos - 1] == "@"):
            out.append(tok)
            pos += 1
            continue
        flag, eq, value = tok.partition("=")
        shown = getattr(tok, "typed", flag)  # as typed (`--a.source[0].b`), for messages
        pos += 1
        if not eq:
            if pos < len(args) and not args[pos].startswith("--") and args[pos] != "@":
                value, pos = args[pos], pos + 1
            else:
                value = "true"  # a bare boolean flag
        segs = flag[2:].split(".")
        index_at = next(j for j, s in enumerate(segs) if s.isdigit())
        list_path = ".".join(segs[:index_at])
        dotted = list_path.replace("-", "_")
        if list_path not in list_paths:
            raise ListFlagError(f"{shown}: `{dotted}` is not a list of sections, so `.{segs[index_at]}.` cannot index "
                                f"it; {_list_fields_hint(list_paths, segs[:index_at])}")  # fmt: skip
        if list_path not in lists:
            node: Any = merged
            for seg in segs[:index_at]:
                node = node.get(seg.replace("-", "_")) if isinstance(node, dict) else None
            given = _json_flag(args, list_path)
            node = node if given is None else given
            if not isinstance(node, list) or not node:
                raise ListFlagError(
                    f"{shown}: no @ file gives items of `{dotted}` ({files}), so item {segs[index_at]} does not exist; "
                    f"add them to a file as [[{dotted}]] tables, or give the whole list: --{list_path} '[{{...}}]'"
                )
            lists[list_path] = json.loads(json.dumps(node, default=str))  # a deep copy, TOML dates as text
        items = lists[list_path]
        index = int(segs[index_at])
        if index >= len(items):
            given_by = f"--{list_path}" if _json_flag(args, list_path) is not None else files
            raise ListFlagError(f"{shown}: `{dotted}` has {len(items)} item(s) (from {given_by}), counted from 0; "
                                f"index {index} is past the end")  # fmt: skip
        if value.startswith(("[", "{")) and flag_kind(cls, flag[2:]).startswith(("list", "tuple:", "json", "section")):
            value = json.loads(value)  # a list, tuple or dict field's one JSON value, or a section's `{}` (`bind_args`)
        _set(items, [int(s) if s.isdigit() else s.replace("-", "_") for s in segs[index_at:]], value, shown)
    for list_path, items in lists.items():
        out = _without_flag(out, list_path) + [f"--{list_path}", json.dumps(items)]
    return out


def _spelt(flag: str, list_path: str) -> bool:
    """Whether `flag` is `--LIST` (dashes or underscores) for the kebab-case `list_path`."""
    return flag.startswith("--") and flag[2:].replace("_", "-") == list_path


def _json_flag(args: list[str], list_path: str) -> list[Any] | None:
    """The list the last `--LIST '[...]'` flag of `args` gives (`--LIST='[...]'` too); None when none does (or its
    JSON does not parse: the loader reports that)."""
    found = None
    for pos, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if not eq:
            value = args[pos + 1] if pos + 1 < len(args) else ""
        if _spelt(flag, list_path) and value.startswith("["):
            try:
                found = json.loads(value)
            except json.JSONDecodeError:
                continue
    return found if isinstance(found, list) else None


def _without_flag(args: list[str], list_path: str) -> list[str]:
    """`args` without the `--LIST '[...]'` flags (their list is the base the indexed flags changed)."""
    out: list[str] = []
    skip = False
    for pos, arg in enumerate(args):
        if skip:
            skip = False
            continue
        flag, eq, _ = arg.partition("=")
        if _spelt(flag, list_path) and (eq or (pos + 1 < len(args) and args[pos + 1].startswith("["))):
            skip = not eq
            continue
        out.append(arg)
    return out


def _list_fields_hint(list_paths: set[str], prefix: list[str]) -> str:
    """The list fields under the same section, as the fix of an index on a field that is not a list."""
    head = ".".join(prefix[:-1])
    near = sorted(p for p in list_paths if p.startswith(head + ".") or not head)[:5]
    if not near:
        return "this config has no list of sections there"
    return "list fields there: " + ", ".join(f"--{p}.N.FIELD" for p in near)


def _set(node: Any, path: list[int | str], value: Any, flag: str) -> None:
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
        if value != {}:  # `--list.N '{}'` keeps the item as the files give it
            node[last] = value
    elif isinstance(node, dict) and value == {} and isinstance(node.get(last), dict):
        pass  # an empty table merged into the section the files give
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ListFlagError(f"{flag}: `{last}` is inside a value that is not a section")
