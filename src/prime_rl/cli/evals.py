"""`evals @ config.toml [--dotted.flags]` (also `prime-rl eval ...`): evaluate a model on environments' eval splits.

The command is `evals`, as in the reference system: a bare `eval` is the shell's builtin in bash and zsh, which runs
its arguments as a shell command instead.
"""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("evals", "prime_rl.config.orchestrator:EvalCommandConfig", "prime_rl.orchestrator.eval_cmd:run",
               "evaluate a model on environments' eval splits (served by `inference`, or in-process)",
               user_errors=("prime_rl.hf_data:DataLoadError", "prime_rl.models.hub:ModelNotFoundError"),
               common=("model.name", "backend.base_url", "eval.num_examples", "eval.rollouts_per_example",
                       "eval.sampling.temperature", "eval.sampling.max_completion_tokens"))  # fmt: skip

if __name__ == "__main__":
    main()
