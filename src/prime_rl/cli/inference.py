"""`inference @ config.toml [--dotted.flags]`: the inference server."""

from __future__ import annotations

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.inference import InferenceConfig
from prime_rl.config.loader import parse_config


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(InferenceConfig, argv, prog="inference")
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "inference")
    load_impl("prime_rl.inference.server:run")(cfg)


if __name__ == "__main__":
    main()
