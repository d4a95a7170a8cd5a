"""The argparse `main` shared by the environment command lines (`gridsim`, `env-server`)."""

from __future__ import annotations

import argparse
import sys


def run_subcommand(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    """Parse `argv` (default sys.argv[1:]), run the chosen subcommand's `fn(args) -> exit code`, and exit.

    Bad input the subcommand reports (missing files, bad values, unknown names) exits 2 with `error: ...`.
    """
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        code = args.fn(args)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        code = 2
    raise SystemExit(code)
