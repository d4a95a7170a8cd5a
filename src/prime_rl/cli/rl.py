"""`rl @ config.toml [--dotted.flags]`: launch inference, orchestrator and trainer in one run directory; with a
`[slurm]` section, render `output_dir/slurm/rl.sbatch` and submit it (`--dry-run`: only write it)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from prime_rl.cli.command import Command, load_impl

if TYPE_CHECKING:
    from prime_rl.config.rl import RLConfig


def write_resolved(cfg: RLConfig) -> dict[str, str]:
    """Write `configs/{rl,trainer,orchestrator,inference}.toml` into the run directory; return their paths."""
    from prime_rl.config.loader import write_config

    run_dir = cfg.orchestrator.output_dir
    cfg = cfg.model_copy(update={"dry_run": False})  # the written rl.toml runs the job for real
    # the launcher forwards every process's metrics to one W&B run; children started by it log none themselves
    trainer = cfg.trainer.model_copy(update={"wandb": None})
    orchestrator = cfg.orchestrator.model_copy(update={"wandb": None})
    out = {}
    for name, section in (("rl", cfg), ("trainer", trainer), ("orchestrator", orchestrator),
                          ("inference", cfg.inference)):
        out[name] = str(write_config(section, run_dir / "configs" / f"{name}.toml"))
    return out


def dry_run(cfg: RLConfig, name: str = "rl") -> None:
    """`rl --dry-run`: check that every environment and custom advantage/loss named resolves (exit 2 naming the
    field when not), write every section's resolved config (`write_resolved`), say where, exit 0. With `[slurm]`
    also the sbatch script (not submitted)."""
    if cfg.slurm is not None:
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_rl")(cfg, sys.argv[1:]))
    status = load_impl("prime_rl.launcher.preflight:dry_run_checks")(cfg)
    if status:
        raise SystemExit(status)
    for section, path in write_resolved(cfg).items():
        print(f"resolved {section} config written to {path}")
    raise SystemExit(0)


def run(cfg: RLConfig) -> None:
    """Run on this host, or with `[slurm]` submit the run as a batch job."""
    if cfg.slurm is not None:
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_rl")(cfg, sys.argv[1:]))
    load_impl("prime_rl.launcher.rl:run")(cfg)


main = Command("rl", "prime_rl.config.rl:RLConfig", "prime_rl.cli.rl:run",
               "launch inference, orchestrator and trainer (and env servers) in one run directory, or submit them "
               "to Slurm ([slurm])", dry_run="prime_rl.cli.rl:dry_run")  # fmt: skip

if __name__ == "__main__":
    main()
