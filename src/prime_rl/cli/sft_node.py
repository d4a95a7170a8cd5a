"""`python -m prime_rl.cli.sft_node @ configs/sft.toml`: one node of a Slurm `sft` job (started by `srun`, one task
per node): checks the shared run directory, then runs this node's part of the multi-node torchrun job."""

from __future__ import annotations

from prime_rl.cli._common import load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.trainer import SFTConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(SFTConfig, argv, prog="sft_node")
    raise SystemExit(load_impl("prime_rl.launcher.slurm:run_sft_node")(cfg))


if __name__ == "__main__":
    main()
