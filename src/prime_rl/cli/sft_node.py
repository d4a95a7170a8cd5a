"""`python -m prime_rl.cli.sft_node @ configs/sft.toml`: one node of a Slurm `sft` job (started by `srun`, one task
per node): checks the shared run directory, then runs this node's part of the multi-node torchrun job."""

from __future__ import annotations

from prime_rl.cli.command import Command, load_impl


def run(cfg) -> None:
    raise SystemExit(load_impl("prime_rl.launcher.slurm:run_sft_node")(cfg))


main = Command("sft_node", "prime_rl.config.trainer:SFTConfig", "prime_rl.cli.sft_node:run", "one node of a Slurm sft job")

if __name__ == "__main__":
    main()
