"""`sft @ config.toml [--dotted.flags]`: SFT."""

from __future__ import annotations

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.trainer import SFTConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(SFTConfig, argv, prog="sft")
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "sft")
    load_impl("prime_rl.trainer.sft:run")(cfg)


if __name__ == "__main__":
    main()
