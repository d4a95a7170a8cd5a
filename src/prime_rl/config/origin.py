"""Where a config value came from: the command-line flag, the `@` file, or nowhere (a default).

Config errors (`loader.format_validation_error`) and checks that run after parsing (`where_set`) name the flag or
file that set the field they complain about, so the user knows what to change.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from prime_rl.config.suggest import dotted as _dotted
from prime_rl.config.suggest import flag as _flag

PARSED: dict[str, Any] = {"argv": [], "positional": frozenset()}
"""The command line `loader.parse_config` read last (positionals bound as `--field value`) and the fields that bare
arguments set."""


def where_set(dotted: str) -> str:
    """Where the command line this process parsed last (`parse_config`) set the field `dotted` (`a.b_c`; a list
    entry as `a.0.b` or `a[0].b`): ` (from --a.b-c)`, ` (in FILE)` for the last `@` file whose TOML holds it, or ""
    (a default, a value derived by a validator or the launcher, or nothing parsed). Checks that run after parsing
    name their field with it."""
    if not PARSED["argv"]:
        return ""
    loc = tuple(int(p) if p.isdigit() else p for p in dotted.replace("[", ".").replace("]", "").split("."))
    return origin(loc, PARSED["argv"], PARSED["positional"])


def fields_origin(loc: tuple, paths: list[tuple[str, ...]], argv: list[str],
                  positional: set[str] | frozenset[str]) -> str:  # fmt: skip
    """Where the fields `paths` under the section at `loc` were set: ` (from --flag)` / ` (in FILE)` when one place
    set them all, else ` (a.b from --flag, a.c in FILE)`; "" when all are defaults."""
    said = [(path, w) for path in paths if (w := origin(loc + path, argv, positional))]
    if not said:
        return ""
    if len({w for _, w in said}) == 1 and len(said) == len(paths):
        return said[0][1]
    return " (" + ", ".join(f"{_dotted(loc + path)} {w.strip()[1:-1]}" for path, w in said) + ")"


def _spellings(loc: tuple) -> set[str]:
    """The flags that name `loc`: with and without its list indices, dashes or underscores."""
    keys = [str(s) for s in loc if not isinstance(s, int)]
    return {_flag(loc), "--" + ".".join(keys), "--" + ".".join(str(s).replace("_", "-") for s in loc),
            "--" + ".".join(str(s).replace("_", "-") for s in loc if not isinstance(s, int))}  # fmt: skip


def _whole_value_flag(loc: tuple, argv: list[str]) -> str:
    """The last flag that gives a section or list above `loc` whole (`--orchestrator.train.source '[{...}]'` for
    `orchestrator.train.source[0].name`), as typed; "" when none does. A flag followed by `@ FILE` (a nested
    file) or by no value (`--wandb`: the section's defaults) gives nothing of its own."""
    prefixes = set()
    for end in range(1, len(loc)):
        if not isinstance(loc[end - 1], int):
            prefixes |= {s.replace("_", "-") for s in _spellings(loc[:end])}
    found = ""
    for pos, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if not eq:
            value = argv[pos + 1] if pos + 1 < len(argv) else "--"
        if arg.startswith("--") and flag.replace("_", "-") in prefixes and not value.startswith(("--", "@")):
            found = getattr(arg, "typed", flag)
    return found


def origin(loc: tuple, argv: list[str], positional: set[str] | frozenset[str] = frozenset()) -> str:
    """` (from --flag)` when a command-line flag set `loc` (` (the OUT argument)` for a positional field), or gave
    a section or list above it whole (a JSON flag), else ` (in FILE)` for the last root-level `@` file whose TOML
    holds it, else "" (a default, a nested `--x @ file`, or a value a validator derived)."""
    keys = [str(s) for s in loc if not isinstance(s, int)]
    if not keys:
        return ""
    flags = _spellings(loc)
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in flags:
            bare = next((p for p in positional if flag == f"--{p.replace('_', '-')}"), None)
            return f" (the {bare.upper()} argument)" if bare else f" (from {getattr(arg, 'typed', flag)})"
    whole = _whole_value_flag(loc, argv)
    if whole:
        return f" (from {whole})"
    # a section-level error (a validator over several fields): flags under the section may have set the value
    under = sorted({getattr(arg, "typed", f) for arg in argv if arg.startswith("--") and (f := arg.split("=", 1)[0])
                    .replace("_", "-").startswith(tuple(x.replace("_", "-") + "." for x in flags))})  # fmt: skip
    found = ""
    for i, arg in enumerate(argv[:-1]):
        if arg != "@":
            continue
        try:
            with open(Path(argv[i + 1]).expanduser(), "rb") as f:
                node: Any = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError):
            continue
        for key in loc:
            if isinstance(key, int):
                node = node[key] if isinstance(node, list) and key < len(node) else None
            else:
                node = node.get(str(key)) if isinstance(node, dict) else None
            if node is None:
                break
        else:
            found = f" (in {argv[i + 1]})"
    if under:
        named = ", ".join(under)
        return f" (from {named}, or in {found[5:-1]})" if found else f" (from {named})"
    return found
