"""`sft @ config.toml [--dotted.flags]`: SFT."""

from __future__ import annotations

import os
import sys

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.trainer import SFTConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(SFTConfig, argv, prog="sft")
    if cfg.slurm is not None and "PRIME_RL_NODE" not in os.environ:  # set by sft_node inside the job: train there
        args = list(sys.argv[1:] if argv is None else argv)
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_sft")(cfg, args))
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "sft")
    load_impl("prime_rl.trainer.sft:run")(cfg)


if __name__ == "__main__":
    main()
