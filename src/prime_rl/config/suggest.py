"""The "did you mean" hint of an unknown config key, and the spelling of a key as a dotted path and as a flag.

A misspelt section (`--orchestrater.batch-size`) gets the closest full flag under the right section
(`--orchestrator.batch-size`), not the section alone. A key that the reference prime-rl spells another way
(`REFERENCE_SPELLINGS`), or that other training frameworks use (`FRAMEWORK_SPELLINGS`: `optim.learning_rate`), names
the spelling used here.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

REFERENCE_SPELLINGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("orchestrator", "sampling"): ("orchestrator", "train", "sampling"),
}
"""Paths of the reference prime-rl's config -> the same setting here."""

FRAMEWORK_SPELLINGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("optim", "learning_rate"): ("optim", "lr"),
}
"""Paths (the end of a key's path) that other training frameworks use (Hugging Face `TrainingArguments`, ...) -> the
same setting here. Names close in spelling (`max_grad_norm` for `max_norm`) get the plain "did you mean"."""


def flag(loc: tuple) -> str:
    """The command-line flag of a config path: ("orchestrator", "batch_size") -> `--orchestrator.batch-size`."""
    return "--" + ".".join(str(s).replace("_", "-") for s in loc if not isinstance(s, int))


def dotted(loc: tuple) -> str:
    """The dotted path of a config location: ("env", 0, "name") -> `env[0].name` (`<root>` when empty)."""
    out = ""
    for seg in loc:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += ("." if out else "") + str(seg)
    return out or "<root>"


def _first_leaf(value: Any) -> tuple[str, ...]:
    """Path below a nested dict to its first non-dict value (`{"a": {"b": 1}}` -> ("a", "b")); () for a non-dict."""
    path: tuple[str, ...] = ()
    while isinstance(value, dict) and value:
        key = next(iter(value))
        path, value = path + (str(key),), value[key]
    return path


def _under(fixed: tuple, value: Any, names_at: Callable[[tuple], list[str]]) -> tuple:
    """`fixed` extended by the first key set under it (the value given for the unknown key), when that key exists
    under `fixed`; else `fixed`."""
    leaf = _first_leaf(value)
    if leaf and all(leaf[i] in names_at(fixed + leaf[:i]) for i in range(len(leaf))):
        return fixed + leaf
    return fixed


def unknown_key_hint(loc: tuple, value: Any, names_at: Callable[[tuple], list[str]]) -> str:
    """`; did you mean ...?` for the unknown key at `loc` (given `value`), or "" when nothing is close.

    `names_at(loc)` gives the field names of the section at a path. The hint names the full path and flag of the
    first setting given under the key, so a misspelt section suggests a flag, not a section.
    """
    keys = tuple(str(s) for s in loc if not isinstance(s, int))
    for whose, table in (("the reference prime-rl's", REFERENCE_SPELLINGS), ("other frameworks'", FRAMEWORK_SPELLINGS)):
        for ref, ours in table.items():
            if keys[-len(ref):] == ref and ours[-1] in names_at(loc[: len(loc) - len(ref)] + ours[:-1]):
                fixed = _under(loc[: len(loc) - len(ref)] + ours, value, names_at)
                return (f"; {whose} `{dotted(ref)}` is `{dotted(ours)}` here: did you mean "
                        f"`{dotted(fixed)}` (flag `{flag(fixed)}`)?")  # fmt: skip
    close = difflib.get_close_matches(str(loc[-1]), names_at(loc[:-1]), n=1, cutoff=0.5)
    if not close:
        return ""
    fixed = _under(loc[:-1] + (close[0],), value, names_at)
    return f"; did you mean `{dotted(fixed)}` (flag `{flag(fixed)}`)?"
