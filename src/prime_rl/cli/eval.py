"""`eval @ config.toml [--dotted.flags]` (also `prime-rl eval ...`): evaluate a model on environments' eval splits."""

from __future__ import annotations

import sys

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.orchestrator import EvalCommandConfig


def main(argv: list[str] | None = None, prog: str = "eval") -> None:
    """Parse the eval config (`argv`, default sys.argv[1:]) and run it. A config error is printed with the dotted
    field name and exits 2."""
    try:
        cfg = parse_config(EvalCommandConfig, argv, prog=prog)
    except ConfigError as e:
        print(f"{prog}: config error\n{e}", file=sys.stderr)
        raise SystemExit(2) from None
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "eval")
    load_impl("prime_rl.orchestrator.eval_cmd:run")(cfg)


if __name__ == "__main__":
    main()
