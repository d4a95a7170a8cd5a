"""Entry point for the NeMo Gym resources server (subcommands; see `--help`)."""

from __future__ import annotations

import sys

from prime_rl.cli.command import load_impl


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    load_impl("prime_rl.envs.nemo_gym.cli:main")(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
