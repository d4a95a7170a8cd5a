"""`trainer @ config.toml [--dotted.flags]`: the RL trainer."""

from __future__ import annotations

from prime_rl.cli.command import Command

# [wandb]: the metrics are forwarded to W&B while it runs (under `rl` the launcher forwards them instead)
main = Command("trainer", "prime_rl.config.trainer:TrainerConfig", "prime_rl.trainer.rl:run", "the RL trainer (run under torchrun)",
               wrap="prime_rl.monitor.wandb_log:run_with_wandb",
               user_errors=("prime_rl.monitor.wandb_log:WandbStartError",))

if __name__ == "__main__":
    main()
