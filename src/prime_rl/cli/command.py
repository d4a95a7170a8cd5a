"""The one command-line style (docs/CONTRIBUTING.md, "Adding a command").

A `Command` is a pydantic config class plus the function that runs it, both named by import path so nothing heavy
is imported before the arguments parsed: `NAME [@ file.toml ...] [--dotted.flags]`, with `--help` (one screen) and
`--help-all` (every field) rendered from the config's fields, errors that name the dotted field (exit 2), and
`--dry-run` (when the config has `dry_run`) writing the resolved config to `output_dir/configs/NAME.toml`. A `Group` is a named table of commands (or groups):
`prime-rl tiny-model ...`, `gridsim baseline ...`. Both are callable as `obj(argv=None, prog=None)`, so a console
script points at either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prime_rl.registry import Registry, RegistryError, import_path


def load_impl(path: str, attr: str | None = None, part: str | None = None) -> Callable[..., Any]:
    """The function at `package.module:function` that a command runs, imported only after its config parsed (so
    `--help` and config errors never import torch or vLLM). The older `load_impl(module, attr, part)` form is
    accepted too. Raises RegistryError when it does not import."""
    return import_path(f"{path}:{attr}" if attr else path, "entry point")  # type: ignore[return-value]


def dry_run(cfg: BaseModel, name: str) -> None:
    """Write the resolved config to `cfg.output_dir/configs/<name>.toml` (to `configs/dry-run/` when that file holds
    another config, which a run there may be using: `config.resolved.write_dry_run`), say where, and exit 0."""
    from prime_rl.config.resolved import dry_run_lines, write_dry_run

    cfg = cfg.model_copy(update={"dry_run": False})  # the written file runs the command for real
    configs_dir = Path(cfg.output_dir) / "configs"
    print("\n".join(dry_run_lines(write_dry_run({name: cfg}, configs_dir), configs_dir)))
    raise SystemExit(0)


class Command:
    """`name [@ file.toml ...] [--dotted.flags]`: parse `config` (import path of a pydantic config class), then call
    `run(cfg)` (import path).

    `help`: one line for a group's listing and the top of `--help`. `positional`: fields that bare arguments fill
    in order (older spellings such as `prime-rl tiny-model OUT`). `dry_run`: import path of `fn(cfg, name)` that
    handles `--dry-run` before `run` is imported (default: write the resolved config and exit 0); it only applies
    when the config has a `dry_run` field. `user_errors`: exceptions of `run` (classes or import paths) that are the
    user's input (a missing file, a bad value), printed as `PROG: error: ...` with exit 2 instead of a traceback.
    `failures`: exceptions of `run` that stop a run for a stated reason (training diverged, a corrupt checkpoint),
    printed the same way with exit 1. A full disk (`prime_rl.diskfull`) ends any command with one line, `no space
    left on device under PATH (F free of T)`, and exit code 28. `common`: dotted fields the short `--help` lists as the most used.
    """

    def __init__(self, name: str, config: str, run: str, help: str, *, positional: tuple[str, ...] = (),
                 dry_run: str = "prime_rl.cli.command:dry_run",
                 user_errors: tuple[type[BaseException] | str, ...] = (),
                 failures: tuple[type[BaseException] | str, ...] = (), common: tuple[str, ...] = ()):  # fmt: skip
        self.name, self.config, self.run, self.help, self.common = name, config, run, help, common
        self.positional, self.dry_run, self.user_errors, self.failures = positional, dry_run, user_errors, failures

    def parse(self, argv: list[str] | None = None, prog: str | None = None) -> BaseModel:
        """The parsed config. A config error is printed as `PROG: config error` plus one line per field (no
        traceback), exit 2."""
        from prime_rl.config.loader import ConfigError, parse_config

        prog = prog or self.name
        cls = import_path(self.config, f"{prog} config")
        description = self.help
        if self.positional:
            names = " ".join(p.upper() for p in self.positional)
            flags = " ".join(f"--{p.replace('_', '-')} {p.upper()}" for p in self.positional)
            description += f"\npositional arguments: `{prog} {names} ...` = `{prog} {flags} ...`"
        try:
            return parse_config(cls, sys.argv[1:] if argv is None else list(argv), prog=prog,  # type: ignore[arg-type]
                                positional=self.positional, description=description, common=self.common)  # fmt: skip
        except ConfigError as e:
            print(f"{prog}: config error\n{e}", file=sys.stderr)
            raise SystemExit(2) from None

    def __call__(self, argv: list[str] | None = None, prog: str | None = None) -> Any:
        cfg = self.parse(argv, prog)
        if getattr(cfg, "dry_run", False):
            import_path(self.dry_run, "dry_run")(cfg, self.name)  # type: ignore[operator]
        fn = load_impl(self.run)
        errors = tuple(import_path(e, "user_errors") if isinstance(e, str) else e for e in self.user_errors)
        failures = tuple(import_path(e, "failures") if isinstance(e, str) else e for e in self.failures)
        exit_on_disk_full = import_path("prime_rl.diskfull:exit_on_disk_full", "disk-full handler")
        try:
            where = getattr(cfg, "output_dir", None) or getattr(cfg, "out", None)  # named when the error names no file
            with exit_on_disk_full(where, prog or self.name):
                return fn(cfg)
        except errors as e:
            print(f"{prog or self.name}: error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        except failures as e:
            print(f"{prog or self.name}: error: {e}", file=sys.stderr)
            raise SystemExit(1) from None


class Group:
    """`name COMMAND ...`: a table of commands (or groups) by name; `name --help` lists them with their help line.
    `epilog`: text under the listing."""

    def __init__(self, name: str, help: str, commands: Mapping[str, Command | Group], epilog: str = ""):
        self.name, self.help, self.epilog = name, help, epilog
        self.commands: Registry[Command | Group] = Registry(f"{name} command", "command", dict(commands))

    def usage(self, prog: str) -> str:
        width = max(len(n) for n in self.commands.names())
        rows = [f"  {n:<{width}}  {self.commands.get(n).help}" for n in self.commands.names()]
        text = f"usage: {prog} COMMAND [@ FILE] [OPTIONS]   (`{prog} COMMAND --help` for a command's options)\n\n"
        text += f"{self.help}\n\ncommands:\n" + "\n".join(rows) + "\n"
        return text + (f"\n{self.epilog}\n" if self.epilog else "")

    def __call__(self, argv: list[str] | None = None, prog: str | None = None) -> Any:
        prog = prog or self.name
        args = sys.argv[1:] if argv is None else list(argv)
        if not args or args[0] in ("-h", "--help"):
            print(self.usage(prog), end="")
            raise SystemExit(0 if args else 2)
        try:
            cmd = self.commands.get(args[0])
        except RegistryError:
            print(f"{prog}: unknown command {args[0]!r}; choose one of: {', '.join(self.commands.names())}",
                  file=sys.stderr)  # fmt: skip
            raise SystemExit(2) from None
        return cmd(args[1:], prog=f"{prog} {args[0]}")
