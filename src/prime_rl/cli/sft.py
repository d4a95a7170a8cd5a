"""`sft @ config.toml [--dotted.flags]`: SFT; with a `[slurm]` section, render `output_dir/slurm/sft.sbatch` and
submit it (`--dry-run`: only write it)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from prime_rl.cli.command import Command, load_impl
from prime_rl.cli.command import dry_run as write_dry_run

if TYPE_CHECKING:
    from prime_rl.config.trainer import SFTConfig


def _submits(cfg: SFTConfig) -> bool:
    return cfg.slurm is not None and "PRIME_RL_NODE" not in os.environ  # set by sft_node inside the job: train there


def dry_run(cfg: SFTConfig, name: str = "sft") -> None:
    """`sft --dry-run`: with [slurm], render (not submit) the sbatch script; else run the checks that load no model
    (`launcher.sft_preflight`: a failed one prints `sft: error: ...` and exits 2), print them, write the resolved
    config and exit 0."""
    if _submits(cfg):
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_sft")(cfg, sys.argv[1:]))
    load_impl("prime_rl.launcher.sft_preflight:dry_run_checks")(cfg, name)
    write_dry_run(cfg, name)


def run(cfg: SFTConfig) -> None:
    if _submits(cfg):
        raise SystemExit(load_impl("prime_rl.launcher.slurm:submit_sft")(cfg, sys.argv[1:]))
    load_impl("prime_rl.launcher.sft_preflight:check_sft")(cfg)  # PreflightError: a user error, exit 2
    load_impl("prime_rl.launcher.sft_eval:run" if cfg.eval is not None else "prime_rl.trainer.sft:run")(cfg)


# [wandb]: trainer.sft.run forwards the metrics to W&B itself (under `rl` the launcher does)
main = Command("sft", "prime_rl.config.trainer:SFTConfig", "prime_rl.cli.sft:run",
               "supervised fine-tuning on chat data (on several nodes with [slurm])", dry_run="prime_rl.cli.sft:dry_run",
               user_errors=("prime_rl.trainer.model:ModelLoadError",  # a wrong model.name: one line, exit 2
                            "prime_rl.trainer.sft_data:SFTDataError",  # a missing file, a bad row, no hub
                            "prime_rl.monitor.wandb_log:WandbStartError",
                            "prime_rl.orchestrator.eval_sweep:ResultExists",  # [eval]: other settings, same folder
                            "prime_rl.launcher.errors:PreflightError",  # a missing data file, an unknown env.id
                            "prime_rl.trainer.ckpt:CheckpointNotFound"),  # ckpt.resume_step names no checkpoint
               failures=("prime_rl.trainer.engine:TrainingDiverged", "prime_rl.trainer.ckpt:CheckpointError",
                         "prime_rl.trainer.publish:NonFiniteWeights",
                         "prime_rl.launcher.errors:LaunchError",  # [eval]: the inference server died or never started
                         "prime_rl.inference.backend:InferenceError"),
               common=("model.name", "data.path", "data.name", "data.batch_size", "data.epochs", "optim.lr",
                       "scheduler.type", "ckpt.interval", "deployment.num_gpus"))

if __name__ == "__main__":
    main()
