"""`python -m prime_rl.cli.rl_node @ configs/rl.toml`: the launcher of one node of a Slurm job (started by `srun`,
one task per node, from the sbatch script `rl` renders). Not for direct use outside an allocation."""

from __future__ import annotations

from prime_rl.cli._common import load_impl
from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(RLConfig, argv, prog="rl_node")
    raise SystemExit(load_impl("prime_rl.launcher.multinode:run_node")(cfg))


if __name__ == "__main__":
    main()
