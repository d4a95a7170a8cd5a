"""`trainer @ config.toml [--dotted.flags]`: the RL trainer."""

from __future__ import annotations

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.trainer import TrainerConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(TrainerConfig, argv, prog="trainer")
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "trainer")
    load_impl("prime_rl.trainer.rl:run")(cfg)


if __name__ == "__main__":
    main()
