"""`evals @ config.toml [--dotted.flags]` (also `prime-rl eval ...`): evaluate a model on environments' eval splits.

The command is `evals`, as in the reference system: a bare `eval` is the shell's builtin in bash and zsh, which runs
its arguments as a shell command instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prime_rl.cli.command import Command, load_impl
from prime_rl.cli.command import dry_run as write_dry_run

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import EvalCommandConfig


def dry_run(cfg: EvalCommandConfig, name: str = "evals") -> None:
    """`evals --dry-run`: check that every `[[eval.source]]` env.id names a registered environment or an import path
    that imports (`launcher.sft_preflight.evals_dry_run_checks`, as `rl --dry-run` and `sft --dry-run` do; a
    failure prints `evals: error: ...` and exits 2, no traceback), print what was checked, write the resolved
    config, exit 0. Nothing is started and no server is contacted."""
    load_impl("prime_rl.launcher.sft_preflight:evals_dry_run_checks")(cfg, name)
    write_dry_run(cfg, name)


main = Command("evals", "prime_rl.config.orchestrator:EvalCommandConfig", "prime_rl.orchestrator.eval_cmd:run",
               "evaluate a model on environments' eval splits (served by `inference`, or in-process)",
               dry_run="prime_rl.cli.evals:dry_run",
               user_errors=("prime_rl.hf_data:DataLoadError", "prime_rl.models.hub:ModelNotFoundError"),
               common=("model.name", "backend.base_url", "eval.num_examples", "eval.rollouts_per_example",
                       "eval.sampling.temperature", "eval.sampling.max_completion_tokens"))  # fmt: skip

if __name__ == "__main__":
    main()
