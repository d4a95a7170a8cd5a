"""`sft @ config.toml [--dotted.flags]`: SFT."""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("sft", "prime_rl.config.trainer:SFTConfig", "prime_rl.trainer.sft:run", "supervised fine-tuning on chat data",
               user_errors=("prime_rl.trainer.model:ModelLoadError",  # a wrong model.name: one line, exit 2
                            "prime_rl.trainer.sft_data:SFTDataError",  # a missing file, a bad row, no hub
                            "prime_rl.monitor.wandb_log:WandbStartError"))

if __name__ == "__main__":
    main()
