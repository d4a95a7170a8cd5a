"""`trainer @ config.toml [--dotted.flags]`: the RL trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prime_rl.cli.command import Command, load_impl

if TYPE_CHECKING:
    from prime_rl.config.trainer import TrainerConfig


def run(cfg: TrainerConfig) -> None:
    """Train (`prime_rl.trainer.rl.run`) and return nothing: the console script passes the return value to
    `sys.exit`, which would print the last step's metrics and exit 1 after a finished run."""
    load_impl("prime_rl.trainer.rl:run")(cfg)


main = Command("trainer", "prime_rl.config.trainer:TrainerConfig", "prime_rl.cli.trainer:run", "the RL trainer (run under torchrun)",
               user_errors=("prime_rl.monitor.wandb_log:WandbStartError", "prime_rl.trainer.model:ModelLoadError",
                            "prime_rl.transport.rollouts:RolloutTransportError",
                            "prime_rl.trainer.ckpt:CheckpointNotFound"),
               failures=("prime_rl.trainer.engine:TrainingDiverged", "prime_rl.trainer.ckpt:CheckpointError",
                         "prime_rl.trainer.publish:NonFiniteWeights"),
               common=("model.name", "optim.lr", "loss.type", "model.lora.rank", "ckpt.interval"))

if __name__ == "__main__":
    main()
