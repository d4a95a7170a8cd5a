"""`python -m prime_rl.cli.rl_node @ configs/rl.toml`: the launcher of one node of a Slurm job (started by `srun`,
one task per node, from the sbatch script `rl` renders). Not for direct use outside an allocation."""

from __future__ import annotations

from prime_rl.cli.command import Command, load_impl


def run(cfg) -> None:
    raise SystemExit(load_impl("prime_rl.launcher.multinode:run_node")(cfg))


main = Command("rl_node", "prime_rl.config.rl:RLConfig", "prime_rl.cli.rl_node:run", "one node of a Slurm rl job")

if __name__ == "__main__":
    main()
