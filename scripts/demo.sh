#!/usr/bin/env bash
# `make demo`: the main job end to end on CPU. Tiny model -> GridSim rows and demonstrations -> SFT -> RL (rl
# launches env server, inference, trainer, orchestrator) -> eval table on the 200 eval days + reward plot.
#   make demo                                 # real ERCOT 2021-2024 hub days (shipped in the package, the default)
#   DATA_DIR=path/to/xlsx make demo           # other years: a folder of ERCOT's DAMLZHBSPP_<year>.xlsx files
#   SYNTHETIC=1 make demo                     # seeded synthetic ERCOT-like days
# Extra flags for `rl` go in RL_ARGS (e.g. RL_ARGS="--max-steps 10"); for `sft` in SFT_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=outputs/demo
DATA_ARGS=()
ENV_ARGS=()
DATA_LABEL="ERCOT days"
if [ -n "${DATA_DIR:-}" ] && [ -n "${SYNTHETIC:-}" ]; then
  echo "demo: set DATA_DIR or SYNTHETIC, not both" >&2
  exit 2
elif [ -n "${DATA_DIR:-}" ]; then
  DATA_DIR=$(cd "$DATA_DIR" && pwd)
  DATA_ARGS=(--data-dir "$DATA_DIR")
  ENV_ARGS=(--env-server.data-dir "$DATA_DIR")
  echo "demo: real ERCOT days from $DATA_DIR"
elif [ -n "${SYNTHETIC:-}" ]; then
  DATA_ARGS=(--synthetic)
  ENV_ARGS=(--env-server.synthetic true)
  DATA_LABEL="synthetic days"
  echo "demo: synthetic days"
else
  echo "demo: real ERCOT 2021-2024 days (packaged; DATA_DIR=... for other years, SYNTHETIC=1 for synthetic days)"
fi
HIDDEN=${HIDDEN:-128}
LAYERS=${LAYERS:-2}
T0=$SECONDS
phase() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }

phase "1/6 tiny model (hidden $HIDDEN x $LAYERS layers, Qwen3 format) -> $OUT/tiny-model"
rm -rf "$OUT/tiny-model"
prime-rl tiny-model "$OUT/tiny-model" --hidden "$HIDDEN" --layers "$LAYERS" --seed 0

phase "2/6 GridSim rows for the NeMo Gym resources server and SFT demonstrations"
rm -rf "$OUT/gym-root"
env-server write gridsim "$OUT/gym-root" "${DATA_ARGS[@]}"
gridsim sft-data --split train --num-train all "${DATA_ARGS[@]}" "$OUT/sft.jsonl"

phase "3/6 SFT warm start (examples/gridsim/sft.toml)"
rm -rf "$OUT/sft"
# shellcheck disable=SC2086
sft @ examples/gridsim/sft.toml --model.name "$OUT/tiny-model" --data.path "$OUT/sft.jsonl" --output-dir "$OUT/sft" ${SFT_ARGS:-}
SFT_MODEL=$(ls -d "$OUT"/sft/weights/step_*/STABLE | sed 's#/STABLE$##' | sort -t_ -k2 -n | tail -1)
echo "SFT model: $SFT_MODEL"

phase "4/6 RL (examples/gridsim/rl.toml): env server, inference, trainer, orchestrator"
# shellcheck disable=SC2086
rl @ examples/gridsim/rl.toml --model.name "$SFT_MODEL" --output-dir "$OUT/rl" --clean "${ENV_ARGS[@]}" ${RL_ARGS:-}

phase "5/6 reference policies on the eval days"
mkdir -p "$OUT/baselines"
for p in idle greedy optimal; do
  gridsim baseline --policy "$p" --split eval "${DATA_ARGS[@]}" --out "$OUT/baselines/$p.jsonl"
done

phase "6/6 eval table and reward plot"
FIRST=$(ls "$OUT"/rl/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | head -1)
LAST=$(ls "$OUT"/rl/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | tail -1)
EVAL_T=$(python -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["eval"]["sampling"]["temperature"])' "$OUT/rl/configs/orchestrator.toml")
prime-rl summary --run "$OUT/rl" \
  --title "GridSim eval ($DATA_LABEL, tiny model ${HIDDEN}x${LAYERS}, RL step $LAST, models sampled at temperature $EVAL_T)" \
  --entry "idle=$OUT/baselines/idle.jsonl" --entry "greedy=$OUT/baselines/greedy.jsonl" \
  --entry "SFT (step $FIRST)=$OUT/rl/eval/step_$FIRST.jsonl" --entry "RL (step $LAST)=$OUT/rl/eval/step_$LAST.jsonl" \
  --entry "optimum=$OUT/baselines/optimal.jsonl" \
  --compare "RL (step $LAST):SFT (step $FIRST)" --compare "RL (step $LAST):greedy"
echo "demo finished in $((SECONDS - T0)) s; table: $OUT/rl/eval/summary.md, plot: $OUT/rl/plots/reward.png"
