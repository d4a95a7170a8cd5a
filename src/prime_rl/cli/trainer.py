"""`trainer @ config.toml [--dotted.flags]`: the RL trainer."""

from __future__ import annotations

from prime_rl.cli.command import Command


def run(cfg):
    """The RL trainer, its metrics forwarded to W&B when `[wandb]` is set (started on its own; under `rl` the
    launcher forwards them)."""
    from prime_rl.monitor.wandb_log import run_with_wandb
    from prime_rl.trainer.rl import run as train

    return run_with_wandb(train, cfg, "trainer", {"trainer"})


main = Command("trainer", "prime_rl.config.trainer:TrainerConfig", "prime_rl.cli.trainer:run",
               "the RL trainer (run under torchrun)", user_errors=("prime_rl.monitor.wandb_log:WandbStartError",))

if __name__ == "__main__":
    main()
