"""Parsing a command's config: `@ a.toml @ b.toml` (deep-merged left to right), then `--dotted.flags`.

Built on `prime-pydantic-config` (the syntax prime-rl uses). Precedence: defaults < files < CLI. Errors name
the full dotted path of the bad key, with a "did you mean" hint for unknown keys and the expected type for
wrong values.

The arguments are first read as the config class says (`config.argv.bind_args`: positional fields, repeated list
flags, the values of tuple and boolean flags); where a value came from is `config.origin`.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from prime_rl.config.argv import ConfigError, TypedAs, bind_args  # noqa: F401  (callers import them from here)
from prime_rl.config.argv import models_in as _models_in
from prime_rl.config.bools import file_bool_problems
from prime_rl.config.list_flags import config_files
from prime_rl.config.origin import PARSED, where_set  # noqa: F401  (callers import where_set from here)
from prime_rl.config.origin import fields_origin as _fields_origin
from prime_rl.config.origin import origin as _origin
from prime_rl.config.resolved import config_to_toml, write_config  # noqa: F401  (callers import them from here)
from prime_rl.config.suggest import Item, field_paths, spelling_hint, unknown_key_hint
from prime_rl.config.suggest import dotted as _dotted
from prime_rl.config.suggest import flag as _flag

T = TypeVar("T", bound=BaseModel)


def parse_config(
    cls: type[T], args: list[str] | None = None, prog: str | None = None, *, positional: tuple[str, ...] = (),
    description: str | None = None, common: tuple[str, ...] = (),
) -> T:
    """Parse `args` (default: sys.argv[1:]) into `cls`. `positional`: field names that bare arguments fill, in
    order (see `bind_args`); `description`: the text under the usage line of `--help`; `common`: dotted fields the
    short `--help` shows as the most used (`--help-all` shows every field; `prime_rl.config.help`).

    Raises:
        ConfigError: unknown key, wrong type, missing file... when `args` is given. When parsing sys.argv the
            message is printed to stderr and the process exits with status 2.
    """
    from pydantic_config import ConfigFileError, cli

    from prime_rl.config.fast_help import install
    from prime_rl.config.help import render_help, wants_help
    from prime_rl.config.layers import replaced_lists
    from prime_rl.config.list_flags import ListFlagError, expand_indexed_flags
    from prime_rl.config.upstream import install_json_paths

    install()  # --help without re-reading every class's source (see fast_help)
    install_json_paths()  # list flags inside optional sections (see config.upstream)

    from_argv = args is None
    argv = sys.argv[1:] if from_argv else list(args)
    kind = wants_help(argv)
    if kind is not None:
        sys.stdout.write(render_help(cls, prog or "prime-rl", description, full=kind == "full", common=common))
        raise SystemExit(0)
    msg = None
    if argv and argv[0].endswith(".toml"):
        msg = f"{argv[0]!r}: a config file is passed after `@`: `{prog or 'prime-rl'} @ {argv[0]} ...`"
    else:
        missing = [f for f in config_files(argv) if not Path(f).expanduser().is_file()]
        if missing:
            msg = (f"config file {missing[0]!r} not found (relative paths are read from the working directory "
                   f"{Path.cwd()})")  # fmt: skip
    bound: list[str] = []
    try:
        bound = bind_args(cls, argv, positional) if msg is None else bound
        msg = msg or "\n".join(file_bool_problems(cls, bound)) or None  # `offline = "yes"`: refused, not read as true
    except ConfigError as e:
        msg = str(e)
    if msg is not None:
        if from_argv:
            print(f"{prog or 'prime-rl'}: config error\n{msg}", file=sys.stderr)
            raise SystemExit(2)
        raise ConfigError(msg)
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    from_bare = {p for p in positional if (f := f"--{p.replace('_', '-')}") in bound and f not in given}
    PARSED.update(argv=bound, positional=from_bare)
    try:
        expanded = expand_indexed_flags(cls, bound)
        parsed = _fill_secrets(cli(cls, args=expanded, prog=prog, description=description), bound)
        for line in replaced_lists(bound):  # a later @ file's list replaces an earlier one's whole: say so
            print(f"{prog or 'prime-rl'}: warning: {line}", file=sys.stderr)
        return parsed
    except ConfigError as e:
        if from_argv:
            print(f"{prog or 'prime-rl'}: config error\n{e}", file=sys.stderr)
            raise SystemExit(2) from None
        raise
    except (ConfigFileError, ListFlagError) as e:
        cause = e.__cause__
        if isinstance(cause, ValidationError):
            msg = format_validation_error(cls, cause, bound, positional=from_bare, takes=positional, prog=prog)
        else:
            msg = f"  {e}"
        if from_argv:
            print(f"{prog or 'prime-rl'}: config error\n{msg}", file=sys.stderr)
            raise SystemExit(2) from None
        raise ConfigError(msg) from e


def format_validation_error(cls: type[BaseModel], err: ValidationError, argv: list[str] | None = None,
                            positional: set[str] | frozenset[str] = frozenset(), takes: tuple[str, ...] = (),
                            prog: str | None = None) -> str:  # fmt: skip
    """One line per problem: `dotted.path: what is wrong (got value) [in FILE | from --flag] [fix]`.

    A required field left unset names its flag and what it is (`out: required, not given: pass --out PATH (Output
    .jsonl file)`), and the bare argument that also sets it when the command takes one (`takes`: the fields bare
    arguments fill, in order; `prog`: the command, for its usage line).

    With `argv` (the command's arguments, positionals bound as `--field value`), each problem names where its value
    came from: the last `@` file that sets that key, or the command-line flag (`positional`: fields a bare argument
    set, named as `the FIELD argument`); a suggestion gives both spellings (`a.b_c`, flag `--a.b-c`). A key that
    belongs to another variant of a section chosen by `type` names the type, where it was set, and the types that
    have the key. Backticked `a.b = value` pairs in a validator's message get their origin too. A section's problem
    whose message names fields of the section (`ckpt.resume_dir`, or a bare `advantage_range = ...`) names where
    those fields were set, not every flag under the section nor a file that holds the section without them; a
    problem of the whole config names where the dotted fields it mentions were set; a problem repeated under a section that holds a copy of a shared value is said once.
    """
    lines = []
    for error in _without_copies(err.errors()):
        loc, tag = _untag(cls, tuple(error.get("loc", ())))
        path = _dotted(loc)
        value = error.get("input")
        got = "" if isinstance(value, dict | list) or value is None else f" (got {toml_value(value)})"
        where = _origin(loc, argv, positional) if argv else ""
        if error.get("type") == "extra_forbidden" and tag is not None and len(loc) == len(tag[0]) + 1:
            variant = next(m for m in tag[3] if _tag_value(m)[1] == tag[2])
            hint = unknown_key_hint(loc, value, lambda at, v=variant, here=loc[:-1]: sorted(v.model_fields) if (
                at == here) else _field_names_at(cls, at), field_paths(cls))  # fmt: skip
            lines.append(f"  {path}{where.replace(' (', ' (set ', 1)}: "
                         f"{_wrong_variant(loc, tag, where, argv or [], positional, hint)}")
        elif error.get("type") == "missing":
            lines.append(f"  {path}: {_required_by_type(_required(cls, loc, takes, prog), loc, tag, argv, positional)}")
        elif error.get("type") == "extra_forbidden":
            hint = unknown_key_hint(loc, value, lambda at: _field_names_at(cls, at), field_paths(cls))
            lines.append(f"  {path}: unknown key{got}{where}{hint}")
        else:
            msg = str(error.get("msg", "")).removeprefix("Value error, ")
            named = _named_fields(cls, loc, msg)
            if argv and named:  # where the named fields were set; all defaults: where the section was
                where = _fields_origin(loc, named, argv, positional) or where
            msg = _BRACKETED.sub(lambda m, at=loc: _dotted(_resolve(cls, at, m.group(0))), msg)
            if argv:
                said = len(msg)
                msg = _BACKTICKED.sub(lambda m, at=loc: m.group(0) + _origin(_resolve(cls, at, m.group(1)), argv,
                                                                            positional), msg)  # fmt: skip
                where = "" if len(msg) > said else where  # the message names where its fields were set
            head = f"{path}: " if loc else ""
            got = "" if not loc or repr(value) in msg or toml_value(value) in msg else got  # quoted once
            spelt = spelling_hint(loc, value, lambda at: _field_names_at(cls, at), field_paths(cls)) if isinstance(
                value, dict) else ""  # a table for a field that is not one: the reference's section (`[resume]`)?
            lines.append(f"  {head}{msg}{got}{where}{spelt}")
    return "\n".join(lines)


def toml_value(value: Any) -> str:
    """`value` as a config message shows it: a boolean as TOML writes it (`true`, `false`), anything else as its
    repr (`'org/ds'`, `0.5`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


_METAVARS = {int: "INT", float: "FLOAT", str: "STR", bool: "true|false", Path: "PATH"}


def _required(cls: type[BaseModel], loc: tuple, takes: tuple[str, ...] = (), prog: str | None = None) -> str:
    """What to give for the required field at `loc` that no file or flag set: its flag with the kind of value
    (`--out PATH`; a section: its `[table]` or `--section.FIELD` flags), the bare argument that fills it when the
    command takes one, and the first sentence of its description."""
    from prime_rl.config.help import first_sentence

    finfo = None
    for model in _models_in(_annotation_at(cls, loc[:-1])) if loc else []:
        finfo = model.model_fields.get(str(loc[-1]), finfo)
    what = f" ({first_sentence(finfo.description).rstrip('.')})" if finfo is not None and finfo.description else ""
    annotation = finfo.annotation if finfo is not None else None
    if annotation is not None and _models_in(annotation):
        return (f"a required section, not given: set [{_dotted(loc)}] in an @ file, or its fields with "
                f"{_flag(loc)}.FIELD VALUE{what}")  # fmt: skip
    text = f"required, not given: pass {_flag(loc)} {_METAVARS.get(annotation, 'VALUE')}{what}"
    if len(loc) == 1 and loc[0] in takes:
        usage = " ".join([prog or "prime-rl", *(name.upper() for name in takes[: takes.index(loc[0]) + 1])])
        text += f", or give it as the {str(loc[0]).upper()} argument (`{usage} ...`)"
    return text


def _required_by_type(text: str, loc: tuple, tag: tuple | None, argv: list[str] | None,
                      positional: set[str] | frozenset[str]) -> str:  # fmt: skip
    """`text` (`_required`'s) naming the `type = "..."` that requires the field at `loc` and where it was set, with
    the key to add next to it in that file (`advantage = { type = "custom" }` needs `import_path`); `text` when
    the field is not one of a section chosen by its type, or nothing was parsed."""
    if tag is None or not argv or len(loc) != len(tag[0]) + 1:
        return text
    section, field, value, _ = tag
    where = _origin(section + (field,), argv, positional)
    if not where:
        return text
    said = f'required by `{_dotted(section + (field,))} = "{value}"`{where}, not given: '
    if where.startswith(" (in "):
        example = '"..."' if " STR" in text else "..."
        said += f'add `{loc[-1]} = {example}` next to `{field} = "{value}"` in {where[5:-1]}, or '
    return said + text.removeprefix("required, not given: ")


def _annotation_at(cls: Any, loc: tuple) -> Any:
    """The annotation reached by walking `loc` from `cls` (through lists, optionals, unions); None when a step
    names no field."""
    current = cls
    for seg in loc:
        if isinstance(seg, int | Item):
            models = _models_in(current)
            current = models[0] if models else None
            continue
        current = next((m.model_fields[seg].annotation for m in _models_in(current) if seg in m.model_fields), None)
        if current is None:
            return None
    return current


def _list_of(annotation: Any) -> Any:
    """`annotation` without an Optional around it (`list[X] | None` -> `list[X]`)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1 else annotation


def _without_copies(errors: list[Any]) -> list[Any]:
    """`errors` without those that repeat, under a longer location, another error's message at a location the
    longer one ends with: rl copies the shared `[ckpt]` into `trainer.ckpt` and `orchestrator.ckpt`, and a problem
    of `ckpt` is said once, at the field the user set."""
    seen = [(tuple(e.get("loc", ())), e.get("msg")) for e in errors]
    return [e for e in errors if not any(
        0 < len(loc) < len(e.get("loc", ())) and tuple(e["loc"])[-len(loc):] == loc and msg == e.get("msg")
        for loc, msg in seen)]  # fmt: skip


def _named_fields(cls: type[BaseModel], loc: tuple, msg: str) -> list[tuple[str, ...]]:
    """The fields under the section at `loc` that the message names as `SECTION.field[.sub...]`
    (`ckpt.resume_dir` for the section `trainer.ckpt`, `train.sampling.top_p` for `orchestrator.train`), as a whole
    dotted path below the section (`train.group_size` for `orchestrator`; at the root, `loc = ()`, from the root:
    `inference.vllm.max_model_len`) or as a bare `field = value` of the section (`advantage_range = [0.5, 0.2]` for `orchestrator.gate`), each as its path below the section, in the
    order they are first named; empty when `loc` is not a section."""
    own = _field_names_at(cls, loc)
    if (loc and isinstance(loc[-1], int)) or not own:
        return []
    named: list[tuple[int, tuple[str, ...]]] = []
    prefixed = [rf"(?<![\w.]){re.escape(str(loc[-1]))}\.(\w[\w.]*\w)"] if loc else []
    for pattern in [*prefixed, _DOTTED]:  # `SECTION.field...` (what resolves of it), a whole dotted path below it
        for match in re.finditer(pattern, msg):
            path: tuple = ()
            parts = match.group(1).split(".")
            for part in parts:
                if part.isdigit() and typing.get_origin(_list_of(_annotation_at(cls, loc + path))) is list:
                    # an entry of a list: `source.0.interval`
                    path += (int(part),)
                    continue
                if part not in _field_names_at(cls, loc + path):
                    break
                path += (part,)
            if path and (pattern != _DOTTED or len(path) == len(parts)):
                named.append((match.start(), path))
    named += [(match.start(), (match.group(1),)) for match in _BARE_SETTING.finditer(msg) if match.group(1) in own]
    found: list[tuple[str, ...]] = []
    for _, path in sorted(named):
        if path not in found:
            found.append(path)
    return found


_DOTTED = r"(?<![\w.])([A-Za-z_]\w*(?:\.(?:[A-Za-z_]\w*|\d+))+)"  # `train.group_size` below the section (or the root)
_BARE_SETTING = re.compile(r"(?<![\w.`\[])([A-Za-z_]\w*) = ")  # `advantage_range = ...` of the section in a message


_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*) = [^`]*`")  # `a.b = 3` in a validator's message
_BRACKETED = re.compile(r"(?<=\[)[A-Za-z_][\w.]*(?=\])")  # a section `[a.b]` / `[[a.b]]` in a validator's message


def _resolve(cls: type[BaseModel], loc: tuple, dotted: str) -> tuple:
    """The full path of `dotted` (`client.base_url`), named in the message of a validator of the section at `loc`:
    as is where the root has its first key, else under the nearest section at or above `loc` that has it
    (`orchestrator.client.base_url` for the orchestrator's validator under `rl`), else as is."""
    keys = tuple(int(k) if k.isdigit() else k for k in dotted.split("."))  # a list entry: `source.0.group_size`
    if keys[0] in _field_names_at(cls, ()):
        return keys
    for i in range(len(loc), 0, -1):
        if keys[0] in _field_names_at(cls, loc[:i]):
            return loc[:i] + keys
    return keys


def _untag(cls: type[BaseModel], loc: tuple) -> tuple[tuple, tuple[tuple, str, str, list[type[BaseModel]]] | None]:
    """`loc` without pydantic's union tags, and the last tag seen as (path of the section, discriminator field,
    tag value, the union's models): ("orchestrator", "advantage", "rloo", "std_normalize") ->
    ("orchestrator", "advantage", "std_normalize"), (("orchestrator", "advantage"), "type", "rloo", [GRPO..])."""
    current: Any = cls
    clean: list = []
    tag = None
    for seg in loc:
        models = _models_in(current)
        if isinstance(seg, int):
            clean.append(seg)
            continue
        owner = next((m for m in models if seg in m.model_fields), None)
        if owner is not None:
            clean.append(seg)
            current = owner.model_fields[seg].annotation
            continue
        variant = next((m for m in models if seg in (_tag_value(m)[1], m.__name__)), None)
        if variant is not None and len(models) > 1:
            tag = (tuple(clean), _tag_value(variant)[0], seg, models)
            current = variant
            continue
        clean.append(seg)
        current = None
    return tuple(clean), tag


def _tag_value(model: type[BaseModel]) -> tuple[str, str]:
    """(field, value) of the single-value Literal field that tags `model` in a union (`type = "rloo"`)."""
    for name, finfo in model.model_fields.items():
        args = typing.get_args(finfo.annotation)
        if typing.get_origin(finfo.annotation) is typing.Literal and len(args) == 1:
            return name, str(args[0])
    return "", ""


def _wrong_variant(loc: tuple, tag: tuple, where: str, argv: list[str], positional: set[str] | frozenset[str],
                   hint: str = "") -> str:  # fmt: skip
    """Why a key is refused in a section chosen by its `type`, where both were set, and the fix; `hint`: the
    "did you mean" of a field of the chosen type, said when no other type has the key."""
    section, field, value, models = tag
    key = str(loc[-1])
    type_loc = section + (field,)
    type_where = _origin(type_loc, argv, positional) or (
        " (inferred from the section's other keys)" if field == "kind" else " (the default)")
    having = [v for m in models if key in m.model_fields and (v := _tag_value(m)[1])]
    text = f"not a setting of {_dotted(type_loc)} = {value!r}{type_where}"
    text += f"; {key} is a setting of {field} {', '.join(repr(h) for h in having)}" if having else ""
    if where.startswith(" (from "):
        fix = f"drop {where[7:-1]}"
    elif where.startswith(" (in "):
        fix = f"remove {key} from [{_dotted(section)}] in {where[5:-1]}"
    else:
        fix = f"remove {key}"
    return f"{text}; {fix}" + (
        f", or choose {field} {' or '.join(repr(h) for h in having)}" if having else hint)


def _field_names_at(cls: Any, loc: tuple) -> list[str]:
    """Field names of the model reached by walking `loc` from `cls` (through lists, optionals, unions)."""
    current = cls
    for seg in loc:
        models = _models_in(current)
        if isinstance(seg, int | Item):
            current = models[0] if models else None
            continue
        nxt = None
        for model in models:
            if seg in model.model_fields:
                nxt = model.model_fields[seg].annotation
                break
        current = nxt
        if current is None:
            return []
    models = _models_in(current)
    return sorted({name for model in models for name in model.model_fields})


def _fill_secrets(cfg: T, argv: list[str]) -> T:
    """`cfg` with each secret that an `@ configs/NAME.toml` file holds as `<redacted>` taken from the environment
    (`secrets.SECRETS_ENV`, entry NAME), where the process that wrote the file put it.

    Raises:
        ConfigError: a redacted secret the environment does not hold (names the field, the file and the fix).
    """
    from prime_rl.config.secrets import REDACTED, SECRETS_ENV, dotted_key, given, secret_fields

    redacted = [path for path, value in secret_fields(cfg) if value == REDACTED]
    if not redacted:
        return cfg
    table, problems = given(), []
    for path in redacted:
        where = _origin(path, argv)
        file = where[5:-1] if where.startswith(" (in ") else ""
        value = table.get(Path(file).stem, {}).get(dotted_key(path)) if file else None
        if value is None:
            entry = json.dumps({Path(file).stem or "NAME": {dotted_key(path): "..."}})
            problems.append(f"  {_dotted(path)}: {REDACTED}{where}: resolved configs hold no secrets; pass it with "
                            f"{_flag(path)}, or as {SECRETS_ENV}='{entry}' (as rl passes it to the processes it starts)")
            continue
        node: Any = cfg
        for key in path[:-1]:
            node = node[key] if isinstance(key, int) else getattr(node, key)
        object.__setattr__(node, path[-1], value)
    if problems:
        raise ConfigError("\n".join(problems))
    return cfg
