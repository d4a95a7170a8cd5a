"""`trainer @ config.toml [--dotted.flags]`: the RL trainer."""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("trainer", "prime_rl.config.trainer:TrainerConfig", "prime_rl.trainer.rl:run", "the RL trainer (run under torchrun)",
               user_errors=("prime_rl.monitor.wandb_log:WandbStartError", "prime_rl.trainer.model:ModelLoadError",
                            "prime_rl.transport.rollouts:RolloutTransportError"),
               failures=("prime_rl.trainer.engine:TrainingDiverged", "prime_rl.trainer.ckpt:CheckpointError",
                         "prime_rl.trainer.publish:NonFiniteWeights"),
               common=("model.name", "optim.lr", "loss.type", "model.lora.rank", "ckpt.interval"))

if __name__ == "__main__":
    main()
