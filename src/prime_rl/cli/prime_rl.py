"""Entry point for the prime-rl utilities (subcommands; see `--help`).

`prime-rl eval @ config.toml ...` is the `eval` command under a name no shell shadows: in bash and zsh a bare
`eval` is the shell's builtin, which runs its arguments as a shell command instead.
"""

from __future__ import annotations

import sys

from prime_rl.cli._common import load_impl


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["eval"]:
        from prime_rl.cli.eval import main as eval_main

        eval_main(args[1:], prog="prime-rl eval")
        return
    load_impl("prime_rl.models.cli:main")(args)


if __name__ == "__main__":
    main()
