"""`sft @ config.toml [--dotted.flags]`: SFT."""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("sft", "prime_rl.config.trainer:SFTConfig", "prime_rl.trainer.sft:run", "supervised fine-tuning on chat data")

if __name__ == "__main__":
    main()
