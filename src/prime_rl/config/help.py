"""`--help` and `--help-all` of a config command.

`--help` is one screen: the command's purpose, the usage line, the top-level options, the most used flags of the
sections (`common`, a command's own list) and one line per section with its flag count. `--help-all` lists every
flag, section by section, as `prime-pydantic-config` collects them. Both are plain text in one shape (`title:`,
then a flag per line with its description from column 30); a command with at most 30 flags shows them all in
`--help`, descriptions whole. Flags read with two changes so that every flag shown is one the
loader accepts: a boolean reads `--x/--no-x` (not `{True,False}`), and the fields of a list of sections read
`--LIST.N.FIELD` (an item an `@` file gave, counted from 0: `prime_rl.config.list_flags`) instead of the library's
`LIST[*].FIELD`, which no parser accepts (a boolean inside a union reads `BOOL`: `--model.fsdp BOOL|{auto}`), and a
tuple reads its values (`--orchestrator.reward-range FLOAT FLOAT`, `config.argv.bind_args`) instead of `TUPLE`.
docs/config.md holds the same fields as tables.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

Row = tuple[str, str, str]  # (flag with metavar, description, "default: X" / "required")
Panel = tuple[str, list[Row]]

_BOOL = re.compile(r"^(?P<name>(?:-\w, )?--(?P<long>\S+)) \{True,False\}(?P<opt>\|None)?$")
_ITEM = re.compile(r"\[\*\]")
_TUPLE = re.compile(r"^(?P<name>(?:-\w, )?--(?P<long>\S+)) TUPLE(?P<opt>\|None)?$")
_METAVARS = {int: "INT", float: "FLOAT", str: "STR", bool: "BOOL"}


def _fix_tuple(cls: type[BaseModel], flag: str) -> str:
    """`--a.b TUPLE` -> `--a.b FLOAT FLOAT` (`TUPLE|None` -> `FLOAT FLOAT|None`): the values a tuple flag takes."""
    import typing

    from prime_rl.config.argv import models_in

    match = _TUPLE.match(flag)
    if match is None:
        return flag
    annotation: Any = cls
    for seg in match["long"].split("."):
        if seg in ("N", "KEY"):
            continue
        name = seg.replace("-", "_")
        finfo = next((m.model_fields[name] for m in models_in(annotation) if name in m.model_fields), None)
        if finfo is None:
            return flag
        annotation = finfo.annotation
    inner = next((typing.get_args(a) for a in (annotation, *typing.get_args(annotation))
                  if typing.get_origin(a) is tuple), ())  # fmt: skip
    names = [_METAVARS.get(a, getattr(a, "__name__", "X").upper()) for a in inner if a is not Ellipsis]
    shown = " ".join(names) + (" [...]" if Ellipsis in inner else "")
    return f"{match['name']} {shown or 'VALUE [...]'}{match['opt'] or ''}"


def _fix_flag(flag: str, index: str) -> str:
    """`--a.b {True,False}` -> `--a.b/--no-a.b`; `--l[*].f` -> `--l.N.f` (`index` is `.N` or `.KEY`)."""
    flag = _ITEM.sub(index, flag)
    match = _BOOL.match(flag)
    if match:
        return f"{match['name']}/--no-{match['long']}"
    return flag.replace("{True,False}", "BOOL")  # a union with a boolean: `--model.fsdp BOOL|{auto}`


def _fix_title(title: str) -> tuple[str, str]:
    """A panel title with the working syntax for list items, and the index placeholder its flags use."""
    match = re.match(r"^(?P<path>\S+?)\[\*\](?P<rest>.*) \((?P<kind>list item|dict value), via @ file or JSON\)$",
                     title)
    if match is None:
        return _ITEM.sub(".N", title), ".N"
    path = _ITEM.sub(".N", match["path"])
    if match["kind"] == "dict value":
        return f"{path}.KEY{match['rest']} (the entry KEY of {path})", ".KEY"
    return (f"{path}.N{match['rest']} (item N of the list {path}, counted from 0, given in an @ file; the whole list: "
            f"[[{path.replace('-', '_')}]] tables in a file, or --{path} '[{{...}}, ...]')", ".N")  # fmt: skip


def panels(cls: type[BaseModel]) -> tuple[list[Row], list[Panel]]:
    """(top-level rows, sub-panels) of `cls` with the flags as the loader accepts them."""
    from prime_rl.config.fast_help import install
    from prime_rl.config.upstream import collect_help_panels

    install()
    root, subs = collect_help_panels(cls)
    subs = _expand_variants(cls, subs, collect_help_panels)
    out: list[Panel] = []
    for title, rows in subs:
        fixed, index = _fix_title(title)
        out.append((fixed, _without_refused(cls, [_shown_default(cls, (_fix_tuple(cls, _fix_flag(f, index)), d, a))
                                                  for f, d, a in rows])))  # fmt: skip
    return _without_refused(cls, [_shown_default(cls, (_fix_tuple(cls, _fix_flag(f, ".N")), d, a))
                                  for f, d, a in root]), out  # fmt: skip


def _shown_default(cls: type[BaseModel], row: Row) -> Row:
    """`row` with the default its field's section names in `SHOWN_DEFAULTS` (`[teacher.vllm]`'s unset fields are
    `[inference.vllm]`'s: `default: [inference.vllm]'s`), else as is."""
    from prime_rl.config.argv import models_in

    flag, desc, default = row
    annotation: Any = cls
    owner, name = None, ""
    for seg in _long(flag)[2:].split("."):
        if seg in ("N", "KEY"):
            continue
        name = seg.replace("-", "_")
        owner = next((m for m in models_in(annotation) if name in m.model_fields), None)
        if owner is None:
            return row
        annotation = owner.model_fields[name].annotation
    shown = getattr(owner, "SHOWN_DEFAULTS", {}).get(name)
    return (flag, desc, f"default: {shown}") if shown else row


def _without_refused(cls: type[BaseModel], rows: list[Row]) -> list[Row]:
    """`rows` without the flags of the fields `cls.NOT_FLAGS` names (dotted, `.N` for a list item: fields of a shared
    section the command refuses, such as `evals`' `eval.interval`), and without their names among the keys a list
    flag shows (`--eval.source list[{name, env, interval, ...}]`)."""
    refused = getattr(cls, "NOT_FLAGS", ())
    if not refused:
        return rows
    flags = {"--" + dotted.replace("_", "-") for dotted in refused}
    out = []
    for flag, desc, anno in rows:
        if _long(flag) in flags:
            continue
        for dotted in refused:
            parent, _, key = dotted.removesuffix(".N").rpartition(".")
            if parent.endswith(".N") and _long(flag) == "--" + parent[:-2].replace("_", "-"):
                flag = re.sub(rf"(?<=[{{ ]){re.escape(key)}, ", "", flag)
        out.append((flag, desc, anno))
    return out


def _expand_variants(cls: type[BaseModel], subs: list[Panel], collect: Any) -> list[Panel]:
    """Add the panels of the sections inside a union's variant (`env.agent`, `env.taskset` and its variants), which
    the library lists as one row each: after each `PATH variant: Class` panel, the panels of Class's sub-sections."""
    import typing

    def _models_in(ann: Any) -> list[type[BaseModel]]:  # the models in a field's annotation (unions, lists, ...)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return [ann]
        return [m for arg in typing.get_args(ann) for m in _models_in(arg)]

    by_name: dict[str, type[BaseModel]] = {}

    def walk(model: type[BaseModel]) -> None:
        if model.__name__ in by_name:
            return
        by_name[model.__name__] = model
        for finfo in model.model_fields.values():
            for sub in _models_in(finfo.annotation):
                walk(sub)

    walk(cls)
    out: list[Panel] = []
    for title, rows in subs:
        out.append((title, rows))
        path, sep, name = title.partition(" variant: ")
        variant = by_name.get(name) if sep else None
        if variant is None:
            continue
        for fname, finfo in variant.model_fields.items():
            ann = finfo.annotation
            if typing.get_origin(ann) is list:
                continue
            prefix = f"{path}.{fname.replace('_', '-')}"
            models = _models_in(ann)
            if len(models) == 1:
                child_rows, child_panels = collect(models[0], prefix=prefix)
                out += [(f"{prefix}: {(finfo.description or '').strip()}", child_rows),
                        *_expand_variants(cls, child_panels, collect)]  # the library's panels: only their variants
            for model in models if len(models) > 1 else []:
                child_rows, child_panels = collect(model, prefix=prefix)
                out += [(f"{prefix} variant: {model.__name__}", child_rows),
                        *_expand_variants(cls, child_panels, collect)]
    return out


def _long(flag: str) -> str:
    """`--a.b-c` of a row's flag (`-x, --a.b-c INT`, `--a/--no-a`)."""
    match = re.match(r"^(?:-\w, )?(--[^\s/]+)", flag)
    return match[1] if match else flag


def _sections(cls: type[BaseModel], subs: list[Panel]) -> list[Row]:
    """One row per top-level section: `--name.*`, its description, how many flags it has."""
    counts: dict[str, int] = {}
    for _, rows in subs:
        for flag, _, _ in rows:
            top = _long(flag)[2:].split(".")[0]
            counts[top] = counts.get(top, 0) + 1
    out = []
    for name, finfo in cls.model_fields.items():
        kebab = name.replace("_", "-")
        if kebab in counts:
            desc = (finfo.description or "").strip()
            optional = ", optional section" if finfo.default is None else ""
            count = counts[kebab]
            tags = _tags(finfo)
            if tags:  # the loader reads `--backend transformers` as `--backend.type transformers`
                field = f"{kebab}.{finfo.discriminator}"
                example = _bare_example(finfo)
                shown = f": `--{kebab} {example}`" if example else ""
                desc = f"{first_sentence(desc)} (a bare value sets `{field}`{shown}; {'/'.join(tags)};"
                out.append((f"--{kebab}.*", f"{desc} {count} flags{optional})", ""))
                continue
            out.append((f"--{kebab}.*", f"{desc} ({count} flag{'s' if count > 1 else ''}{optional})", ""))
    return out


def _tags(finfo: Any) -> list[str]:
    """The tag values of a section that is a union of configs told apart by a field (`backend.type`: server,
    transformers, custom), in the union's order; [] for any other field."""
    import typing

    if not isinstance(finfo.discriminator, str):
        return []
    models = [a for a in typing.get_args(finfo.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    tags = [m.model_fields[finfo.discriminator].default for m in models if finfo.discriminator in m.model_fields]
    return [str(t) for t in tags] if len(tags) > 1 else []


def _bare_example(finfo: Any) -> str | None:
    """A tag of a tagged-union section (not the default, the first one) that works as a bare flag value: its config
    needs no other field (`--backend transformers`, not `--backend custom`, which needs an import_path); None when
    every other variant needs more."""
    import typing

    for model in [a for a in typing.get_args(finfo.annotation) if isinstance(a, type) and issubclass(a, BaseModel)][1:]:
        fields = model.model_fields
        if finfo.discriminator in fields and not any(
            f.is_required() for name, f in fields.items() if name != finfo.discriminator
        ):
            return str(fields[finfo.discriminator].default)
    return None


def render_help(cls: type[BaseModel], prog: str, description: str | None = None, *, full: bool = False,
                common: tuple[str, ...] = ()) -> str:  # fmt: skip
    """The `--help` text (`full`: `--help-all`). `common`: dotted fields (`orchestrator.batch_size`) shown in the
    short form under "most used".

    Raises:
        KeyError: a `common` field that is not a flag of `cls`.
    """
    from prime_rl.config.upstream import term_width

    width = term_width(True)
    root, subs = panels(cls)
    n_flags = len(root) + sum(len(r) for _, r in subs)
    short = "the one-screen help" if full and n_flags > 30 else "this help"
    head = [("-h, --help", short, ""),
            ("--help-all", "every flag of every section (also docs/config.md)", "")]  # fmt: skip
    lines = [f"usage: {prog} [@ FILE ...] [--dotted.flags]", ""]
    if description:
        lines += [*description.splitlines(), ""]
    lines += ["Values come from the defaults, then each @ FILE (TOML, left to right), then the flags. A boolean is",
              "`--x` / `--x true` or `--no-x` / `--x false`; `--x None` clears an optional field.", ""]  # fmt: skip
    if full or n_flags <= 30:
        for title, rows in [("options", head + root), *subs]:
            lines += _compact(title, rows, width, whole=True)
        return "\n".join(lines).rstrip() + "\n"
    by_flag = _merge_variants([row for _, rows in subs for row in rows])
    picked = []
    for dotted in common:
        flag = "--" + dotted.replace("_", "-")
        if flag not in by_flag:
            raise KeyError(f"common flag {flag} is not a flag of {cls.__name__}")
        picked.append(by_flag[flag])
    lines += _compact("options", head + root, width)
    if picked:
        lines += _compact("most used", picked, width)
    lines += _compact("sections (`--help-all` lists their flags)", _sections(cls, subs), width)
    lines.append(f"{n_flags} flags in all: `{prog} --help-all`, or the tables of docs/config.md.")
    return "\n".join(lines).rstrip() + "\n"


def _merge_variants(rows: list[Row]) -> dict[str, Row]:
    """Rows by long flag; a flag listed by several variants of a section (`--advantage.type {grpo}`, `{rloo}`, ...)
    becomes one row naming every choice."""
    out: dict[str, Row] = {}
    for flag, desc, anno in rows:
        key = _long(flag)
        if key not in out:
            out[key] = (flag, desc, anno)
            continue
        old = out[key][0]
        old_match, new_match = re.search(r"\{(.*)\}$", old), re.search(r"\{(.*)\}$", flag)
        if old_match and new_match:
            old_choices = old_match[1].split(",")
            choices = [*old_choices, *(c for c in new_match[1].split(",") if c not in old_choices)]
            out[key] = (f"{key} {{{','.join(choices)}}}", "Which variant of the section; --help-all lists each one's fields.",
                        out[key][2])  # fmt: skip
    return out


def first_sentence(text: str) -> str:
    """The gist of a field's description for the one-screen help: `text` up to the end of its first sentence, or to
    its first `;` or `:` when that comes earlier (and leaves at least 12 characters), never inside parentheses;
    `--help-all` shows the whole description."""
    text = (text or "").strip()
    cuts = [m.start() + 1 for m in re.finditer(r"\.\s+(?=[A-Z`(])", text)]  # keep the period
    cuts += [m.start() for m in re.finditer(r"[;:]\s", text)]
    depth, outside = 0, set()
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth <= 0:
            outside.add(i)
    cuts = [c for c in cuts if c >= 12 and (c - 1) in outside and c in outside | {len(text)}]
    return text[: min(cuts)].rstrip() if cuts else text


def _compact(title: str, rows: list[Row], width: int, col: int = 30, whole: bool = False) -> list[str]:
    """`title:` (wrapped to `width`) then one entry per row: the flag, the first sentence of its description
    (`whole`: all of it) from column `col` (below a longer flag), wrapped to `width`. Plain text: every `--help`
    and `--help-all` panel has this one shape."""
    import textwrap

    heading = title if title.endswith((":", ".")) else f"{title}:"
    out = textwrap.wrap(heading, width, subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    for flag, desc, anno in rows:
        desc = (desc or "").strip() if whole else first_sentence(desc)
        text = f"{desc} ({anno})" if desc and anno else (desc or anno)
        body = textwrap.wrap(text, max(20, width - col), break_on_hyphens=False, break_long_words=False) or [""]
        first = f"  {flag}"
        if len(first) + 2 <= col:
            out.append(f"{first:<{col}}{body[0]}".rstrip())
            body = body[1:]
        else:
            out.append(first)
        out += [" " * col + b for b in body]
    return [*out, ""]


def wants_help(argv: list[str]) -> str | None:
    """"full" for `--help-all`, "short" for `-h` / `--help`, else None."""
    if "--help-all" in argv:
        return "full"
    if "-h" in argv or "--help" in argv:
        return "short"
    return None


def check_common(cls: type[BaseModel], common: tuple[str, ...]) -> list[str]:
    """The `common` fields that are not flags of `cls` (for tests)."""
    _, subs = panels(cls)
    flags = {_long(f) for _, rows in subs for f, _, _ in rows}
    return [c for c in common if "--" + c.replace("_", "-") not in flags]


def all_flags(cls: type[BaseModel]) -> list[str]:
    """Every long flag `--help-all` lists (for tests)."""
    root, subs = panels(cls)
    return [_long(f) for f, _, _ in root] + [_long(f) for _, rows in subs for f, _, _ in rows]

