"""`rl @ config.toml [--dotted.flags]`: launch inference, orchestrator and trainer in one run directory; with a
`[slurm]` section, render `output_dir/slurm/rl.sbatch` and submit it. `--dry-run`: check everything that needs no
running process, print the launch plan and write the resolved configs (and the sbatch script), start nothing."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from prime_rl.cli.command import Command, load_impl

if TYPE_CHECKING:
    from prime_rl.config.rl import RLConfig


def dry_run(cfg: RLConfig, name: str = "rl") -> None:
    """`rl --dry-run`: every check that needs no running process of the run (model, rows and data files, URLs,
    ports, extension import paths, lengths, renderer, what answers at each resources_url), the checks and the
    launch plan printed, the resolved configs written; exit 0, or 2 naming what failed. With `[slurm]` also the
    sbatch script (not submitted). See `prime_rl.launcher.dryrun`."""
    if cfg.slurm is not None:
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_rl")(cfg, sys.argv[1:]))
    raise SystemExit(load_impl("prime_rl.launcher.dryrun:dry_run")(cfg))


def run(cfg: RLConfig) -> None:
    """Run on this host, or with `[slurm]` submit the run as a batch job."""
    if cfg.slurm is not None:
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_rl")(cfg, sys.argv[1:]))
    load_impl("prime_rl.launcher.rl:run")(cfg)


main = Command("rl", "prime_rl.config.rl:RLConfig", "prime_rl.cli.rl:run",
               "launch inference, orchestrator and trainer (and env servers) in one run directory, or submit them "
               "to Slurm ([slurm])", dry_run="prime_rl.cli.rl:dry_run",
               common=("model.name", "orchestrator.batch_size", "orchestrator.train.group_size",
                       "orchestrator.train.sampling.temperature", "orchestrator.train.sampling.max_completion_tokens",
                       "orchestrator.advantage.type", "orchestrator.eval.interval", "trainer.optim.lr",
                       "trainer.loss.type", "deployment.num_train_gpus", "ckpt.interval", "wandb.project"))  # fmt: skip

if __name__ == "__main__":
    main()
