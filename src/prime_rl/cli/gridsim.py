"""Entry point for the GridSim tools (subcommands; see `--help`)."""

from __future__ import annotations

import sys

from prime_rl.cli._common import load_impl


def main(argv: list[str] | None = None) -> None:
    load_impl("prime_rl.envs.gridsim.cli:main")(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
