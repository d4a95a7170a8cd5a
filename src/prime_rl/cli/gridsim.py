"""`gridsim COMMAND [--flags]` (also `prime-rl gridsim COMMAND`): the GridSim tools."""

from __future__ import annotations

from prime_rl.cli.command import Command, Group

_ERRORS = (FileNotFoundError, ValueError, KeyError)  # a missing data folder, a bad day, an unknown split

main = Group("gridsim", "the GridSim tools: reference-policy baselines, SFT demonstrations, one task's prompts", {
    "baseline": Command(
        "baseline", "prime_rl.config.gridsim:GridSimBaselineConfig", "prime_rl.envs.gridsim.cli:baseline",
        "score a reference policy on a split; print the mean, write per-task scores", user_errors=_ERRORS,
    ),
    "sft-data": Command(
        "sft-data", "prime_rl.config.gridsim:GridSimDemosConfig", "prime_rl.envs.gridsim.cli:sft_data",
        "write demonstrations (optimal submit_schedule calls) as chat JSONL", positional=("out",), user_errors=_ERRORS,
    ),
    "show": Command(
        "show", "prime_rl.config.gridsim:GridSimShowConfig", "prime_rl.envs.gridsim.cli:show",
        "print one task's prompts and optimal schedule", user_errors=_ERRORS + (IndexError,),
    ),
    "pack-ercot": Command(
        "pack-ercot", "prime_rl.config.gridsim:GridSimPackConfig", "prime_rl.envs.gridsim.cli:pack_ercot",
        "write the five hubs' prices of ERCOT xlsx files as a compact .npz", positional=("out",), user_errors=_ERRORS,
    ),
})

if __name__ == "__main__":
    main()
