"""torchrun driver for the textbook-gradient test: `torchrun ... tests/trainer/grad_probe.py OUT.pt @ trainer.toml`
runs the real RL trainer (`prime_rl.trainer.rl.run`) with a probe that saves the gradient of its first optimizer
step to OUT.pt (rank 0)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.trainer.textbook import install_probe  # noqa: E402

from prime_rl.config.loader import parse_config  # noqa: E402
from prime_rl.config.trainer import TrainerConfig  # noqa: E402
from prime_rl.trainer import rl  # noqa: E402

if __name__ == "__main__":
    install_probe(Path(sys.argv[1]))
    rl.run(parse_config(TrainerConfig, sys.argv[2:], prog="grad_probe"))
