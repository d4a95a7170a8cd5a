"""`rl --dry-run`: resolve the launch plan (`plan.resolve`: every check that needs no running process of the run),
print what was checked and the plan, and write the resolved configs (never over other ones a run in output_dir may
be using: `config.resolved.write_dry_run`); start nothing. With `[slurm]` the same
checks (those that need the nodes themselves run on each node when the job starts), `configs/rl.toml` and the
sbatch script, not submitted (`slurm.submit_rl`)."""

from __future__ import annotations

import sys

from prime_rl.config.resolved import dry_run_lines, write_dry_run
from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import LaunchError
from prime_rl.launcher.notices import metrics_urls, warnings
from prime_rl.launcher.plan import CHECKS, RunPlan

# what each check of `plan.resolve` looks at, for the dry run's report
CHECK_TEXT = {
    "run directory": "trainer, orchestrator and inference share one output_dir",
    "sizes": "batch_size is a multiple of the group size (at least the largest, when train sources differ)",
    "model": "every section's model.name is a model folder or a hub id that resolves; chat_template files exist",
    "extensions": "environment ids and custom advantage / loss / backend import paths import",
    "urls": "orchestrator.client.base_url and every resources_url are http(s) URLs with a host",
    "context": "seq_len fits the context inference serves (max_model_len, else the model's own)",
    "renderer": "the orchestrator's renderer builds for the model's tokenizer with its settings (enable_thinking)",
    "inference client": "the orchestrator's base_url names the replicas rl starts",
    "env servers": "each resources_url answers, or rl can start a server there from rows",
    "env server identity": "what answers at a resources_url is the env server of the source's rows",
    "data": "rows and eval rows exist (or rl writes them), data directories exist",
    "capacity": "max_inflight fits each resources server's capacity",
    "ports": "every port rl binds on the node is free",
    "previous run": "--resume, ckpt.resume_step or ckpt.resume_dir name a complete checkpoint (trainer and "
                    "orchestrator); a previous run needs --resume or --clean",
    "placement": "the GPUs (or CPU cores) of each role are there",
    "prompt lengths": "a sample of each source's first prompts leaves room to sample within seq_len (and an "
                      "evaluated source's num_examples within its eval split, else a warning below)",
}
assert set(CHECK_TEXT) == set(CHECKS)


def report(plan: RunPlan) -> str:
    """What `--dry-run` prints: every check that ran, those left to each node, the plan, the metrics endpoints'
    URLs and the warnings (the checks' own, `RunPlan.warnings`: an eval num_examples above its split; and
    `notices.warnings`: skip flags with nothing to resume, recipe settings switched off)."""
    lines = ["checked (nothing started):"]
    lines += [f"  ok  {name}: {CHECK_TEXT[name]}" for name in plan.checks]
    lines += [f"  on each node at start  {name}: {CHECK_TEXT[name]}" for name in plan.deferred]
    lines += ["plan:", plan.describe()]
    if plan.config is not None:
        lines += [f"  {u}" for u in metrics_urls(plan.config)]
        lines += [f"warning: {w}" for w in [*plan.warnings, *warnings(plan.config)]]
    return "\n".join(lines)


def dry_run(cfg: RLConfig) -> int:
    """`rl --dry-run` without `[slurm]` (with it: `slurm.submit_rl`). Returns the exit status: 0, or 2 after
    printing the failed check's message (no traceback, nothing written)."""
    from prime_rl.launcher.layout import Layout
    from prime_rl.launcher.plan import resolve
    from prime_rl.monitor.rundir import RunDir

    try:
        plan = resolve(cfg, Layout.single())
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(report(plan))
    configs_dir = RunDir(plan.run_dir).configs
    print("\n".join(dry_run_lines(write_dry_run(plan.configs, configs_dir), configs_dir, "rl")))
    return 0
