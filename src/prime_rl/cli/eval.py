"""`eval`: a deprecated alias of `evals` (see `prime_rl.cli.evals`).

A bare `eval` is the shell's builtin in bash and zsh (`eval --help` prints bash's help), so the command is named
`evals`; this script still runs it, after saying so on stderr.
"""

from __future__ import annotations

import sys
from typing import Any

from prime_rl.cli.evals import main as evals


def main(argv: list[str] | None = None, prog: str | None = None) -> Any:
    """Print the deprecation note to stderr, then run `evals` with the same arguments."""
    print("eval: deprecated name; the command is `evals` (or `prime-rl eval`): in bash and zsh a bare `eval` runs "
          "the shell's builtin instead of this command", file=sys.stderr)  # fmt: skip
    return evals(argv, prog=prog or "evals")


if __name__ == "__main__":
    main()
