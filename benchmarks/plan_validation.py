"""The deployment simulator's prediction of real runs against what they measured.

    python benchmarks/plan_validation.py --run NAME=RUN_DIR=INFERENCE_TOML=CPU_PER_TURN_S [...] [--first 3]
        [--fixture tests/simulate/fixtures/validation.json]

For each run: its measurement (`prime_rl.simulate.measure.measure_run`: trainer pass, publish and weight-load times,
step time publish to publish, off-policy lags of the traced turns, means over steps `--first`..second-to-last), the
simulator config that models it (`plan_for_run`: the run's orchestrator settings and rollout shape, the measured
trainer and weight times, the `[inference]` table of INFERENCE_TOML as `benchmarks/plan_inputs.py` prints it, and
CPU_PER_TURN_S of control-plane CPU per turn), the prediction, and the relative error of the step time and the
absolute error of the mean off-policy lag. `--fixture` writes configs and measurements as JSON for
tests/simulate/test_validation.py.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

from prime_rl.config.plan import PlanConfig
from prime_rl.simulate.measure import measure_run, plan_for_run
from prime_rl.simulate.report import simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR=INFERENCE_TOML=CPU_PER_TURN_S")
    ap.add_argument("--first", type=int, default=3, help="first step measured (earlier ones fill the pipeline)")
    ap.add_argument("--fixture", type=Path, default=None)
    args = ap.parse_args()
    entries = []
    print("| run | step s measured | step s predicted | error | mean off-policy measured | predicted |")
    print("|---|---|---|---|---|---|")
    for spec in args.run:
        name, run, inf_path, cpu = spec.split("=")
        inference = tomllib.loads(Path(inf_path).read_text())["inference"]
        meas = measure_run(Path(run), first=args.first)
        plan = plan_for_run(Path(run), meas, inference, cpu_per_turn_s=float(cpu))
        res = simulate(PlanConfig.model_validate(plan))
        err = res.step_time_s / meas.step_time_s - 1
        print(f"| {name} | {meas.step_time_s:.3f} | {res.step_time_s:.3f} | {100 * err:+.1f}% | "
              f"{meas.mean_off_policy:.2f} | {res.mean_off_policy:.2f} |")  # fmt: skip
        entries.append({"name": name, "plan": plan, "measured": meas.to_dict(),
                        "predicted": {"step_time_s": res.step_time_s, "mean_off_policy": res.mean_off_policy}})  # fmt: skip
    if args.fixture is not None:
        args.fixture.parent.mkdir(parents=True, exist_ok=True)
        args.fixture.write_text(json.dumps(entries, indent=1) + "\n")
        print(f"written {args.fixture}")


if __name__ == "__main__":
    main()
