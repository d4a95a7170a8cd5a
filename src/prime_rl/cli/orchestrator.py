"""`orchestrator @ config.toml [--dotted.flags]`: the orchestrator."""

from __future__ import annotations

from prime_rl.cli.command import Command


def run(cfg):
    """The orchestrator, its metrics (orchestrator and eval rows) forwarded to W&B when `[wandb]` is set."""
    from prime_rl.monitor.wandb_log import run_with_wandb
    from prime_rl.orchestrator.main import run as orchestrate

    return run_with_wandb(orchestrate, cfg, "orchestrator", {"orchestrator", "eval"})


main = Command("orchestrator", "prime_rl.config.orchestrator:OrchestratorConfig", "prime_rl.cli.orchestrator:run",
               "the orchestrator (rollouts, advantages, packing, eval)",
               user_errors=("prime_rl.monitor.wandb_log:WandbStartError", "prime_rl.hf_data:DataLoadError"))

if __name__ == "__main__":
    main()
