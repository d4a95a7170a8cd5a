"""`eval @ config.toml [--dotted.flags]`: eval."""

from __future__ import annotations

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.orchestrator import EvalCommandConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(EvalCommandConfig, argv, prog="eval")
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "eval")
    load_impl("prime_rl.orchestrator.eval_cmd", "run", "eval")(cfg)


if __name__ == "__main__":
    main()
