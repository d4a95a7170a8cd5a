"""`orchestrator @ config.toml [--dotted.flags]`: the orchestrator."""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("orchestrator", "prime_rl.config.orchestrator:OrchestratorConfig", "prime_rl.orchestrator.main:run", "the orchestrator (rollouts, advantages, packing, eval)",
               user_errors=("prime_rl.monitor.wandb_log:WandbStartError", "prime_rl.hf_data:DataLoadError",
                            "prime_rl.models.hub:ModelNotFoundError"),
               common=("model.name", "client.base_url", "train.group_size", "train.sampling.temperature",
                       "train.sampling.max_completion_tokens", "advantage.type", "eval.interval", "ckpt.interval"))

if __name__ == "__main__":
    main()
