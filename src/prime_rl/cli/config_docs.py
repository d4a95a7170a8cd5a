"""The configuration reference (`docs/config.md`), generated from the pydantic models.

`python -m prime_rl.cli.config_docs --write docs/config.md` rewrites the page; `tests/test_config_docs.py` fails
when the committed page differs from what the models give (a field added, a default or description changed).
"""

from __future__ import annotations

import argparse
import enum
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import PydanticUndefined

HEADER = """# Configuration reference

Generated from the config models by `python -m prime_rl.cli.config_docs --write docs/config.md`; do not edit by
hand (`tests/test_config_docs.py` fails when this page is stale). Every field can be set in a TOML file passed with
`@ file.toml` (the dotted name is the TOML table and key) or on the command line as `--dotted.name value` (dashes or
underscores); precedence is defaults < files (left to right) < flags. A field whose default reads `(required)` and
that no file or flag sets is refused naming its flag (`out: required, not given: pass --out PATH`) and, for a
command that takes bare arguments, the argument that also sets it; a field that a section's `type` requires
(`import_path` of `advantage = { type = "custom" }`) also names where that type was set and the key to add next to
it. `None` in a file or on the command line
sets a field that admits None to None (a text field that does not keeps "None" as text). The resolved configs
(`configs/*.toml`) leave out a None whose default is None and list a section's other None fields under `_null`
(`_null = ["max_norm"]` in `[optim]`). `prime-rl eval` takes the same flags as `evals`, `prime-rl dashboard` as
`dashboard`; `gridsim X` is `prime-rl gridsim X`.
Layered files (`@ a.toml @ b.toml`) merge tables key by key, but a list is one value: a later file's list (`[[X]]`
tables included) replaces an earlier file's whole, and the command warns once per list, naming it and both files.
For `rl`, the `trainer.*`, `orchestrator.*` and `inference.*` sections take the fields of those commands. A list of
sections (`X.N`, e.g. `eval.source.N`) is given as `[[X]]` tables in a file, or whole as JSON (`--X '[{...}]'`);
`--X.N.FIELD VALUE` (or `--X[N].FIELD VALUE`, as errors print the field) changes one field of item N (counted from
0) of the list a file or that JSON flag gave. A section (a table) takes its fields one by one or one JSON object,
merged into the table the files give (`--orchestrator.train.source.0.sampling '{"temperature": 0.7}'` =
`--orchestrator.train.source.0.sampling.temperature 0.7`; `--wandb '{}'` turns an optional section on). A boolean
flag is `--x` (or `--x true`/`--x false`, any case; 1/0 and yes/no are refused) or `--no-x` (read as `--x false`:
a message that names where a field was set names `--no-x`); in a file a boolean is
written unquoted (`offline = true`: `"true"`, `"yes"` or `1` are refused). A list or tuple field takes its values
after the flag (`--trainer.model.lora.target-modules q_proj v_proj`, `--orchestrator.gate.advantage-range 0.1 0.9`;
a tuple takes exactly as many as it holds) or one JSON list (`--orchestrator.gate.advantage-range '[0.1, 0.9]'`).
The reference prime-rl's names that differ here (`orchestrator.algo`, `resume.step`, `monitors.wandb`, ...) are
refused with the field that does the same here. Each command's
`--help` shows one screen of plain text (top-level options, most used flags, sections; a command with at most 30
flags lists them all), `--help-all` every field.
"""


def commands() -> list[tuple[str, type[BaseModel], str]]:
    """(command, config class, what it is) for every command line: the processes of a run, then the `prime-rl`
    utilities (groups walked, so a new command is documented once it is registered)."""
    import importlib

    from prime_rl.registry import import_path

    out: list[tuple[str, type[BaseModel], str]] = []

    def add(prog: str, cmd: Any) -> None:
        if hasattr(cmd, "commands"):  # a Group
            for name in cmd.commands.names():
                add(f"{prog} {name}", cmd.commands.get(name))
        elif prog not in ("prime-rl eval", "prime-rl dashboard"):  # the same commands as `evals`, `dashboard`
            out.append((prog, import_path(cmd.config, "config"), cmd.help))

    for name in ("rl", "sft", "trainer", "orchestrator", "inference", "evals", "env-server", "dashboard"):
        add(name, importlib.import_module(f"prime_rl.cli.{name.replace('-', '_')}").main)
    add("prime-rl", importlib.import_module("prime_rl.cli.prime_rl").main)
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def type_text(annotation: Any) -> str:
    """A short type name: `int`, `float | None`, `"constant" | "cosine"`, `list[str]`, `dict[str, Any]`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    return getattr(annotation, "__name__", str(annotation))


def default_text(finfo: Any) -> str:
    """The default as a reader would write it; `(required)` when there is none."""
    if finfo.default is PydanticUndefined and finfo.default_factory is None:
        return "(required)"
    value = finfo.default_factory() if finfo.default is PydanticUndefined else finfo.default
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return f"{len(value)} item(s)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, str | Path):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _tables(cls: type[BaseModel], prefix: str, skip: set[str], refused: tuple[str, ...] = ()) -> list[str]:
    """Markdown for `cls`: one table of its leaf fields, then one per nested model (depth first); `refused`: the
    dotted fields the command refuses (its config's `NOT_FLAGS`), left out as its `--help` leaves them out."""
    rows, nested = [], []
    for name, finfo in cls.model_fields.items():
        if not prefix and name in skip:
            continue
        path = f"{prefix}.{name}" if prefix else name
        if path in refused:
            continue
        models = _models_in(finfo.annotation)
        is_list = typing.get_origin(finfo.annotation) is list or any(
            typing.get_origin(a) is list for a in typing.get_args(finfo.annotation)
        )
        if models and not is_list and len(models) == 1:
            nested.append((path, models[0], finfo, " (optional section, default None)" if finfo.default is None else ""))
            continue
        default = getattr(cls, "SHOWN_DEFAULTS", {}).get(name) or default_text(finfo)  # [teacher.vllm]: inherited
        rows.append(f"| `{path}` | `{_cell(type_text(finfo.annotation))}` | {_cell(default)} | "
                    f"{_cell(finfo.description or '')} |")  # fmt: skip
        if models and is_list:
            nested.append((f"{path}.N", models[0], finfo, f" (item N of the list: [[{path}]] tables)"))
        for variant in models if not is_list else ():  # a section chosen by its `type`: every variant's fields
            tag = next((f'{n} = "{typing.get_args(f.annotation)[0]}"' for n, f in variant.model_fields.items()
                        if typing.get_origin(f.annotation) is typing.Literal
                        and len(typing.get_args(f.annotation)) == 1), variant.__name__)  # fmt: skip
            nested.append((path, variant, finfo, f" ({tag})"))
    out = []
    if rows:
        out += ["| field | type | default | description |", "|---|---|---|---|", *rows, ""]
    for path, model, finfo, note in nested:
        title = _cell(finfo.description or _first_paragraph(model.__doc__))
        out += [f"### `{path}`{note}", "", title, ""]
        out += _tables(model, path, skip, refused)
    return out


def _first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line (a sentence may wrap over several source lines)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def render() -> str:
    """The whole page."""
    parts = [HEADER]
    for cmd, cls, what in commands():
        skip = {"trainer", "orchestrator", "inference"} if cmd == "rl" else set()
        doc = _first_paragraph(cls.__doc__)
        parts += [f"## `{cmd}`", "", _cell(what) + ".", "", _cell(doc), ""]
        parts += _tables(cls, "", skip, getattr(cls, "NOT_FLAGS", ()))
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m prime_rl.cli.config_docs", description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, default=None, help="write the page to this file (default: print it)")
    args = parser.parse_args(argv)
    text = render()
    if args.write is None:
        print(text, end="")
    else:
        args.write.write_text(text)
        print(f"wrote {args.write} ({len(text.splitlines())} lines)")


if __name__ == "__main__":
    main()
