"""`orchestrator @ config.toml [--dotted.flags]`: the orchestrator."""

from __future__ import annotations

from prime_rl.cli._common import dry_run, load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.orchestrator import OrchestratorConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(OrchestratorConfig, argv, prog="orchestrator")
    if cfg.dry_run:
        dry_run(cfg, cfg.output_dir, "orchestrator")
    load_impl("prime_rl.orchestrator.main:run")(cfg)


if __name__ == "__main__":
    main()
