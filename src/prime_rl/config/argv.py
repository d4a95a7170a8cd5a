"""Command-line arguments as the config loader reads them (`bind_args`): which flag takes how many values, read
off the config class.

Two argparse habits are kept for the utilities' older spellings: a command may name `positional` fields that bare
arguments fill in order (`prime-rl tiny-model OUT` = `--out OUT`), and a list field given twice collects both values
(`--entry a=x --entry b=y` = `--entry a=x b=y`). A tuple field takes its values after the flag (`--orchestrator.
reward-range -1 1`) or one JSON list (`'[-1, 1]'`), like a list field; a boolean takes true/false or no value, and a
word after it that fills no positional field is refused naming the flag. A list item's index may be written in
brackets, as messages print a field (`--orchestrator.train.source[0].group-size` = `--orchestrator.train.source.0.
group-size`), and an indexed flag takes its value as the same field's plain flag does. A section (a table) takes
its fields as flags or one JSON object (`--orchestrator.train.source.0.sampling '{"temperature": 0.7}'` =
`--orchestrator.train.source.0.sampling.temperature 0.7`), merged into the table the files give.
"""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Any

from pydantic import BaseModel


class ConfigError(ValueError):
    """A config could not be parsed; the message is meant for the user."""


def bind_args(cls: type[BaseModel], args: list[str], positional: tuple[str, ...] = ()) -> list[str]:
    """Rewrite argparse-style arguments into the config loader's: bare arguments (neither a flag, nor a flag's
    value, nor an `@ file`) fill the `positional` fields in order as `--field value`, and a list field's repeated
    flag is merged into one (`--x a --x b` -> `--x a b`). Which flag takes a value is read off `cls` (a bool takes
    none unless `true`/`false` follows, a list takes every value up to the next `--flag` or `@`, a tuple as many,
    handed on as one JSON list, a section none or one JSON object, read as its dotted flags: `_table_flags`). A
    list item's index in brackets (`--a.source[0].b`) is read as `--a.source.0.b`. Bare arguments beyond
    `positional` are left in place, for the loader to report.

    Raises:
        ConfigError: a word after a boolean flag that is not true/false (1/0 and yes/no included) or after a
            section flag, that fills no positional field; a JSON value (`[...]`, `{...}`) of a list, tuple or dict
            field that does not parse, or a section's that is not one JSON object; the message names the flag.
    """
    out: list[str | list[str]] = []  # a list field's values stay one (growing) entry until the end
    bare: list[str] = []
    lists: dict[str, list[str]] = {}
    as_json: set[int] = set()  # lists inside an optional section or a union variant: the loader reads them as JSON
    after_bool: dict[int, str] = {}  # index in `bare` -> the boolean flag (or section) the word followed
    args = [part for tok in args for part in _split_eq(cls, tok)]
    pos, num_args = 0, len(args)
    while pos < num_args:
        tok = args[pos]
        if tok == "@":
            out += args[pos : pos + 2]
            pos += 2
            continue
        if not tok.startswith("--"):
            (out if tok.startswith(("-", "@")) else bare).append(tok)
            pos += 1
            continue
        kind = flag_kind(cls, tok[2:]) if "=" not in tok else "given"
        pos += 1
        if kind.startswith(("section", "tagged:")) and pos < num_args and args[pos].lstrip().startswith("{"):
            args[pos - 1 : pos + 1] = table = _table_flags(cls, tok, args[pos])  # `--x '{"a": 1}'` = `--x.a 1`
            num_args, pos = len(args), pos - 1
            if table == [tok, "{}"]:  # an empty table of a list item: the item's section, merged as given
                out += table
                pos += 2
            continue
        if kind.startswith("tagged:"):  # `--backend transformers` = `--backend.type transformers`
            if pos < num_args and not args[pos].startswith(("-", "@")) and args[pos] != "None":
                out += [TypedAs(f"{tok}.{kind[7:]}", tok), args[pos]]
                pos += 1
                continue
            kind = "section"
        if kind.startswith(("list", "tuple:")) and "_" in tok:  # the loader matches a list's flag in kebab case only
            tok = TypedAs("--" + tok[2:].replace("_", "-"), tok)
        if kind == "list":
            end = pos
            while end < num_args and not args[end].startswith("--") and args[end] != "@":
                end += 1
            if tok not in lists:
                lists[tok] = []
                out += [tok, lists[tok]]
                if _in_optional_or_union(cls, tok[2:]) or any(seg.isdigit() for seg in tok[2:].split(".")):
                    as_json.add(id(lists[tok]))  # an indexed flag's value goes into a list item as one JSON value
            lists[tok] += args[pos:end]
            pos = end
            continue
        if kind.startswith("tuple:"):  # `--x 0.1 0.9` -> `--x '["0.1", "0.9"]'`; `--x '[0.1, 0.9]'`, `--x None` as given
            end = pos
            while end < num_args and not args[end].startswith("--") and args[end] != "@":
                end += 1
            values = args[pos:end]
            size = int(kind[6:] or len(values))
            if len(values) != size and not (len(values) == 1 and values[0].startswith(("[", "None"))):
                raise ConfigError(f"  {tok} takes {size} values ({tok} {' '.join(['X'] * size)}, or one JSON list: "
                                  f"{tok} '[...]'); got {len(values)}: {' '.join(values) or 'none'}")  # fmt: skip
            out += [tok, *(values if len(values) == 1 and values[0].startswith(("[", "None")) else
                           [json.dumps(values)] if values else [])]  # fmt: skip
            pos = end
            continue
        out.append(tok)
        nxt = args[pos] if pos < num_args else "--"
        if kind == "negated":  # `--no-x` -> `--x false`: one spelling, so `config.origin` finds where x was set
            out[-1:] = [TypedAs("--" + tok[5:], tok), "false"]
            nxt = "--" if nxt.startswith("@") else nxt
        if kind.startswith("bool") and nxt.lower() in ("true", "false"):  # not 1/0, yes/no (refused below)
            out.append(nxt.lower())
            pos += 1
        elif kind == "bool|None" and nxt == "None":
            out[-1] = TypedAs(f"{tok}=None", tok)  # the loader would read `--x None` as `--x` (true) and a stray word
            pos += 1
        elif kind.startswith("bool") and nxt.startswith("@"):
            out.append("true")  # `--x @ file` would load the file into `x` (a section's form): `--x true`
        elif kind.startswith(("bool", "negated")) and not nxt.startswith(("-", "@")):
            after_bool[len(bare)] = tok  # a positional field's value, or else a wrong value of this flag
        elif kind.startswith(("bool", "negated")) and nxt[1:2].isdigit():
            raise ConfigError(_bool_value_error(tok, nxt, kind))
        elif kind in ("value", "json") and not nxt.startswith("--"):
            out.append(nxt)
            pos += 1
        elif kind == "section" and nxt == "None":
            out.append(nxt)  # `--wandb None`: an optional section off (the loader refuses it for any other)
            pos += 1
        elif kind == "section" and not nxt.startswith(("-", "@")):
            after_bool[len(bare)] = tok  # a positional field's value, or else a wrong value of this section
    for i in range(len(positional), len(bare)):
        if i in after_bool:
            flag = after_bool[i]
            kind = flag_kind(cls, flag[2:])
            if kind == "section":
                typed = getattr(flag, "typed", flag)
                raise ConfigError(f"  {typed} is a table: set its fields ({typed}.FIELD VALUE), or give it one JSON "
                                  f"object ({typed} '{{\"FIELD\": VALUE}}'); got {bare[i]!r}")  # fmt: skip
            raise ConfigError(_bool_value_error(flag, bare[i], kind))
    flat: list[str] = []
    for entry in out:
        if isinstance(entry, list) and id(entry) in as_json and not (len(entry) == 1 and entry[0].startswith("[")):
            entry = [json.dumps(entry)]
        flat.extend(entry if isinstance(entry, list) else [entry])
    _check_json(cls, flat)
    for name, value in zip(positional, bare, strict=False):
        flat += [f"--{name.replace('_', '-')}", value]
    return flat + bare[len(positional) :]


_BRACKET = re.compile(r"\[(\d+)\]")


def _split_eq(cls: type[BaseModel], tok: str) -> list[str]:
    """`--x=v` as `--x`, `v` where `--x` is a boolean, list or tuple field, or a section given a JSON object (read
    like `--x v`); else `[tok]`. A list
    item's index in brackets (`--a.source[0].b`, as messages print the field) is read as `--a.source.0.b`; the
    flag remembers the spelling typed (`TypedAs`)."""
    flag, eq, value = tok.partition("=")
    if tok.startswith("--") and _BRACKET.search(flag):
        flag = TypedAs(_BRACKET.sub(r".\1", flag), flag)
        tok = TypedAs(flag + eq + value, flag.typed)
    kind = flag_kind(cls, flag[2:]) if tok.startswith("--") and eq else ""
    if kind.startswith(("bool", "list", "tuple:")) or (kind.startswith(("section", "tagged:")) and value.startswith("{")):
        return [flag, value]
    return [tok]


def _table_flags(cls: type[BaseModel], flag: str, text: str) -> list[str]:
    """The flags that set a section's fields one by one from the JSON object `text` given for the section `flag`
    (`--x.sampling '{"temperature": 0.7}'` -> `--x.sampling.temperature 0.7`: merged into the table the files give,
    as the dotted flags are); a nested object becomes its own section flag and JSON value, read the same way. Each
    flag remembers `flag` as the one typed. An empty object turns an optional section on with its defaults (`--x`;
    `--x {}` for an item of a list, merged by `list_flags`) and sets nothing in any other section.

    Raises:
        ConfigError: `text` is not valid JSON or not an object (the message names the flag and the dotted form).
    """
    typed = getattr(flag, "typed", flag)
    try:
        table = json.loads(text)
    except json.JSONDecodeError as e:
        table = e
    if not isinstance(table, dict):
        why = f"not valid JSON ({table.msg} at character {table.pos + 1})" if isinstance(table, Exception) else (
            f"a JSON {type(table).__name__}, not an object")  # fmt: skip
        raise ConfigError(f"  {typed}: {why}; a table takes one JSON object in single quotes for the shell, with its "
                          f"texts in double quotes ({typed} '{{\"FIELD\": VALUE}}'), or set each field: "
                          f"{typed}.FIELD VALUE; got {text!r}")  # fmt: skip
    if not table:
        if any(seg.isdigit() for seg in flag[2:].split(".")):
            return [flag, "{}"]
        return [flag] if _admits_none(_field(cls, flag[2:])) else []
    out: list[str] = []
    for key, value in table.items():
        sub = TypedAs(f"{flag}.{str(key).replace('_', '-')}", typed)
        if isinstance(value, str) and value.startswith("--"):
            out.append(TypedAs(f"{sub}={value}", typed))  # a text such as "--x" is not read as a flag
        elif isinstance(value, str):
            out += [sub, value]
        else:
            out += [sub, "None" if value is None else json.dumps(value)]  # true/false, numbers, JSON lists, objects
    return out


def _bool_value_error(flag: str, value: str, kind: str) -> str:
    """The message of a word after a boolean flag that is not true/false (`kind`: "bool", "bool|None" or
    "negated")."""
    if kind == "negated":
        return f"  {flag} takes no value (it sets {flag[5:]} to false; got {value!r})"
    return (f"  {flag} takes true{', false or None' if kind == 'bool|None' else ' or false'}, or no value ({flag} "
            f"alone = true, --no-{flag[2:]} = false; got {value!r})")  # fmt: skip


def _check_json(cls: type[BaseModel], flat: list[str]) -> None:
    """Refuse a JSON value (`[...]` or `{...}`) of a list, tuple or dict flag that does not parse, naming the flag
    (the loader would stop with a traceback)."""
    for flag, value in zip(flat, flat[1:], strict=False):
        if (flag.startswith("--") and value.startswith(("[", "{"))
                and flag_kind(cls, flag[2:]).startswith(("list", "tuple:", "json"))):  # fmt: skip
            try:
                json.loads(value)
            except json.JSONDecodeError as e:
                raise ConfigError(f"  {flag}: not valid JSON ({e.msg} at character {e.pos + 1} of {value!r}); quote "
                                  "the whole value for the shell ('[...]') and write its texts in double quotes"
                                  ) from None


class TypedAs(str):
    """A flag `bind_args` rewrote, remembering the flag the user typed (`--backend.type` from `--backend
    transformers`): where a message names the flag that set a value, it names `typed`."""

    typed: str

    def __new__(cls, flag: str, typed: str) -> TypedAs:
        out = super().__new__(cls, flag)
        out.typed = getattr(typed, "typed", typed)  # a flag rewritten twice names what was typed first
        return out


def _field(cls: type[BaseModel], flag: str) -> Any:
    """The annotation of the field `--flag` names (list indices skipped), or None when no field has that path."""
    current: Any = cls
    for seg in flag.split("."):
        if seg.isdigit():
            continue
        name = seg.replace("-", "_")
        finfo = next((m.model_fields[name] for m in models_in(current) if name in m.model_fields), None)
        if finfo is None:
            return None
        current = finfo.annotation
    return current


def _admits_none(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
        annotation)  # fmt: skip


def flag_kind(cls: type[BaseModel], flag: str) -> str:
    """What `--flag` takes: "bool" ("bool|None" where None is allowed), "negated" (`--no-flag` of a bool: no
    value), "list", "tuple:N" (N values; "tuple:" for `tuple[X, ...]`), "json" (a dict: one JSON value),
    "tagged:TAG" (a union of sections told apart by field TAG: a bare value sets it), "section" (a sub-config) or
    "value" (anything else, unknown flags included, as the loader reads them)."""
    if flag.startswith("no-") and flag_kind(cls, flag[3:]).startswith("bool"):
        return "negated"
    current: Any = cls
    finfo = None
    item = False  # the flag names an item of a list (`--a.source.0`)
    for seg in flag.split("."):
        item = seg.isdigit()
        if item:  # an index into a list of sections: the item's fields follow
            continue
        models = models_in(current)
        name = seg.replace("-", "_")
        finfo = next((m.model_fields[name] for m in models if name in m.model_fields), None)
        if finfo is None:
            return "value"
        current = finfo.annotation
    if finfo is None or item:
        return "section" if finfo is not None and models_in(current) else "value"
    ann = finfo.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) in (
        typing.Union, types.UnionType) else [ann]  # fmt: skip
    discriminator = finfo.discriminator
    if len(args) == 1 and typing.get_origin(args[0]) is typing.Annotated:
        # an optional tagged union (`AdvantageConfig | None`): the tag is in the Annotated metadata, not the field's
        inner, *meta = typing.get_args(args[0])
        discriminator = next((m.discriminator for m in meta if isinstance(getattr(m, "discriminator", None), str)),
                             discriminator)  # fmt: skip
        args = list(typing.get_args(inner)) if typing.get_origin(inner) in (typing.Union, types.UnionType) else [inner]
    if args == [bool]:
        return "bool|None" if args != [ann] else "bool"
    if any(typing.get_origin(a) is list for a in args):
        return "list"
    tuples = [typing.get_args(a) for a in args if typing.get_origin(a) is tuple]
    if tuples:
        return f"tuple:{'' if Ellipsis in tuples[0] else len(tuples[0])}"
    if any(typing.get_origin(a) is dict for a in args):
        return "json"
    models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    if len(models) > 1 and isinstance(discriminator, str):
        return f"tagged:{discriminator}"
    if models:
        return "section"
    return "value"


def _in_optional_or_union(cls: type[BaseModel], flag: str) -> bool:
    """Whether `--flag` names a field inside a section that may be None or is one variant of a union (the config
    library reads a value there as one string, or as JSON when it starts with `[` or `{`)."""
    current: Any = cls
    for seg in flag.split(".")[:-1]:
        if seg.isdigit():  # an index into a list of sections
            continue
        models = models_in(current)
        name = seg.replace("-", "_")
        finfo = next((m.model_fields[name] for m in models if name in m.model_fields), None)
        if finfo is None:
            return False
        current = finfo.annotation
        inner = [a for a in typing.get_args(current) if a is not type(None)]
        if typing.get_origin(current) in (typing.Union, types.UnionType) and (len(inner) > 1 or len(inner) < len(
                typing.get_args(current))):  # fmt: skip
            return True
    return False


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: itself, or those inside a list, union, `Annotated`, ..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, typing.Annotated) or origin is not None:
        out = []
        for arg in typing.get_args(annotation):
            out.extend(models_in(arg))
        return out
    return []
