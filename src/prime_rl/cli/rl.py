"""`rl @ config.toml [--dotted.flags]`: launch inference, orchestrator and trainer in one run directory."""

from __future__ import annotations

from prime_rl.cli._common import load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig


def write_resolved(cfg: RLConfig) -> dict[str, str]:
    """Write `configs/{rl,trainer,orchestrator,inference}.toml` into the run directory; return their paths."""
    from prime_rl.config.loader import write_config

    run_dir = cfg.orchestrator.output_dir
    cfg = cfg.model_copy(update={"dry_run": False})  # the written rl.toml runs the job for real
    out = {}
    for name, section in (("rl", cfg), ("trainer", cfg.trainer), ("orchestrator", cfg.orchestrator),
                          ("inference", cfg.inference)):
        out[name] = str(write_config(section, run_dir / "configs" / f"{name}.toml"))
    return out


def _args(argv: list[str] | None) -> list[str]:
    import sys

    return list(sys.argv[1:] if argv is None else argv)


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(RLConfig, argv, prog="rl")
    if cfg.slurm is not None:  # render output_dir/slurm/rl.sbatch and submit it (or only write it: --dry-run)
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_rl")(cfg, _args(argv)))
    if cfg.dry_run:
        for name, path in write_resolved(cfg).items():
            print(f"resolved {name} config written to {path}")
        raise SystemExit(0)
    load_impl("prime_rl.launcher.rl:run")(cfg)


if __name__ == "__main__":
    main()
