#!/usr/bin/env bash
# `make demo`: the main job end to end on CPU. Tiny model -> GridSim rows and demonstrations -> SFT -> RL (rl
# launches env server, inference, trainer, orchestrator) -> two eval tables + reward plot. GridSim's forward-in-time
# split: training days and the 200 `eval` days before FORWARD_FROM (default 2024-01-01), the 200 `forward` days on or
# after it; one table scores the held-out days of the training years (interpolation), the other the later days.
#   make demo                                 # real ERCOT 2021-2024 hub days (shipped in the package, the default)
#   DATA_DIR=path/to/xlsx make demo           # other years: a folder of ERCOT's DAMLZHBSPP_<year>.xlsx files
#   SYNTHETIC=1 make demo                     # seeded synthetic ERCOT-like days
#   FORWARD_FROM=2023-07-01 make demo         # another cut-off (a date inside the data)
#   FORWARD_FROM= make demo                   # no forward split: train and eval days from every year, one table
# With the forward split, SFT learns from every training day and RL from the last year of them (RL_TRAIN_FROM,
# default one year before FORWARD_FROM; RL_TRAIN_FROM= for every training day).
# Extra flags for `rl` go in RL_ARGS (e.g. RL_ARGS="--max-steps 10"); for `sft` in SFT_ARGS.
#   SFT_MODEL=outputs/demo/sft/weights/step_1000 RL_SEED=1 OUT=outputs/demo-s1 make demo
#     reuses an existing SFT model (skips the tiny model and SFT) and seeds RL with 1 (trainer, orchestrator and
#     sampling seeds; default 0), so RL seeds can be compared from one SFT model. The model must come from a demo
#     with the same FORWARD_FROM (its eval days are held out from that demo's training days only).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/demo}
RL_SEED=${RL_SEED:-0}
REUSE_SFT=${SFT_MODEL:-}
FORWARD_FROM=${FORWARD_FROM-2024-01-01}
for var in FORWARD_FROM RL_TRAIN_FROM; do
  if [ -n "${!var:-}" ] && ! python -c 'import datetime, sys; datetime.date.fromisoformat(sys.argv[1])' "${!var}" 2>/dev/null; then
    echo "demo: $var=${!var} is not a date YYYY-MM-DD (e.g. 2024-01-01)" >&2
    exit 2
  fi
done
if [ -n "$FORWARD_FROM" ] && [ -z "${RL_TRAIN_FROM+set}" ]; then
  RL_TRAIN_FROM=$(python -c 'import datetime as d, sys; t = d.date.fromisoformat(sys.argv[1]); print(t.replace(year=t.year - 1, day=28 if (t.month, t.day) == (2, 29) else t.day))' "$FORWARD_FROM")
fi
RL_TRAIN_FROM=${RL_TRAIN_FROM:-}
if [ -n "$REUSE_SFT" ] && [ ! -f "$REUSE_SFT/STABLE" ]; then
  echo "demo: SFT_MODEL=$REUSE_SFT is not a published model folder (no STABLE file)" >&2
  exit 1
fi
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
RL_FILES=(@ examples/gridsim/rl.toml)
if [ -n "$FORWARD_FROM" ]; then
  DATA_ARGS+=(--forward-from "$FORWARD_FROM")
  ENV_ARGS+=(--env-server.forward-from "$FORWARD_FROM")
  RL_FILES+=(@ examples/gridsim/rl_forward.toml)
  echo "demo: forward split: train and eval days before $FORWARD_FROM, forward days from it on (FORWARD_FROM= for none)"
fi
# RL's rows only: the SFT demonstrations keep every training day
ROW_ARGS=("${DATA_ARGS[@]}")
if [ -n "$RL_TRAIN_FROM" ]; then
  [ -n "$FORWARD_FROM" ] || { echo "demo: RL_TRAIN_FROM needs the forward split (FORWARD_FROM)" >&2; exit 2; }
  ROW_ARGS+=(--train-from "$RL_TRAIN_FROM")
  ENV_ARGS+=(--env-server.train-from "$RL_TRAIN_FROM")
  echo "demo: RL trains on the days from $RL_TRAIN_FROM to $FORWARD_FROM (RL_TRAIN_FROM= for every training day)"
elif [ -n "$FORWARD_FROM" ]; then
  ENV_ARGS+=(--env-server.train-from None)  # rl_forward.toml's train_from would otherwise name days RL did not train on
fi
# The rl configs name their rows under outputs/demo/gym-root; every source reads $OUT/gym-root instead.
ROWS=$(python - "$OUT/gym-root" "${RL_FILES[@]}" <<'PY'
import json, sys
from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig
cfg = parse_config(RLConfig, sys.argv[2:], prog="rl")
for field in ("train", "eval"):
    sources = getattr(cfg.orchestrator, field).source
    if sources:
        rows = json.dumps([s.model_dump(mode="json", exclude_defaults=True) for s in sources])
        print(f"--orchestrator.{field}.source")
        print(rows.replace("outputs/demo/gym-root/", sys.argv[1] + "/"))
PY
)
mapfile -t ROWS_ARGS <<< "$ROWS"
HIDDEN=${HIDDEN:-128}
LAYERS=${LAYERS:-2}
T0=$SECONDS
phase() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }

if [ -z "$REUSE_SFT" ]; then
  phase "1/6 tiny model (hidden $HIDDEN x $LAYERS layers, Qwen3 format) -> $OUT/tiny-model"
  rm -rf "$OUT/tiny-model"
  prime-rl tiny-model "$OUT/tiny-model" --hidden "$HIDDEN" --layers "$LAYERS" --seed 0
fi

phase "2/6 GridSim rows for the NeMo Gym resources server and SFT demonstrations"
rm -rf "$OUT/gym-root"
env-server write gridsim "$OUT/gym-root" "${ROW_ARGS[@]}"
if [ -n "$REUSE_SFT" ]; then
  phase "3/6 SFT: reusing $REUSE_SFT"
  SFT_MODEL=$REUSE_SFT
else
  gridsim sft-data --split train --num-train all "${DATA_ARGS[@]}" "$OUT/sft.jsonl"
  phase "3/6 SFT warm start (examples/gridsim/sft.toml)"
  rm -rf "$OUT/sft"
  # shellcheck disable=SC2086
  sft @ examples/gridsim/sft.toml --model.name "$OUT/tiny-model" --data.path "$OUT/sft.jsonl" --output-dir "$OUT/sft" ${SFT_ARGS:-}
  SFT_MODEL=$(ls -d "$OUT"/sft/weights/step_*/STABLE | sed 's#/STABLE$##' | sort -t_ -k2 -n | tail -1)
fi
echo "SFT model: $SFT_MODEL"
SEED_ARGS=(--trainer.seed "$RL_SEED" --orchestrator.seed "$RL_SEED" --orchestrator.train.sampling.seed "$RL_SEED")

phase "4/6 RL (${RL_FILES[*]}, seed $RL_SEED): env server, inference, trainer, orchestrator"
# shellcheck disable=SC2086
rl "${RL_FILES[@]}" --model.name "$SFT_MODEL" --output-dir "$OUT/rl" --clean "${ROWS_ARGS[@]}" "${ENV_ARGS[@]}" \
  "${SEED_ARGS[@]}" ${RL_ARGS:-}

phase "5/6 reference policies on the eval days${FORWARD_FROM:+ and the forward days}"
mkdir -p "$OUT/baselines"
for p in idle greedy optimal; do
  gridsim baseline --policy "$p" --split eval "${DATA_ARGS[@]}" --out "$OUT/baselines/$p.jsonl"
  if [ -n "$FORWARD_FROM" ]; then
    gridsim baseline --policy "$p" --split forward "${DATA_ARGS[@]}" --out "$OUT/baselines/$p-forward.jsonl"
  fi
done

phase "6/6 eval tables and reward plot"
FIRST=$(ls "$OUT"/rl/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | head -1)
LAST=$(ls "$OUT"/rl/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | tail -1)
EVAL_T=$(python -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["eval"]["sampling"]["temperature"])' "$OUT/rl/configs/orchestrator.toml")
WHAT="$DATA_LABEL, tiny model ${HIDDEN}x${LAYERS}, RL step $LAST, models sampled at temperature $EVAL_T"
summary() {  # summary TITLE EVAL_SOURCE BASELINE_SUFFIX [more prime-rl summary flags]
  local title=$1 source=$2 b=$3
  shift 3
  prime-rl summary --title "$title" \
    --entry "idle=$OUT/baselines/idle$b.jsonl" --entry "greedy=$OUT/baselines/greedy$b.jsonl" \
    --entry "SFT (step $FIRST)=$OUT/rl/eval/step_$FIRST.jsonl#$source" \
    --entry "RL (step $LAST)=$OUT/rl/eval/step_$LAST.jsonl#$source" --entry "optimum=$OUT/baselines/optimal$b.jsonl" \
    --compare "RL (step $LAST):SFT (step $FIRST)" --compare "RL (step $LAST):greedy" "$@"
}
if [ -n "$FORWARD_FROM" ]; then
  summary "GridSim eval, held-out days before $FORWARD_FROM ($WHAT)" gridsim "" --run "$OUT/rl"
  summary "GridSim forward eval, days from $FORWARD_FROM on, after every training day ($WHAT)" \
    gridsim-forward -forward --out "$OUT/rl/eval/summary-forward.md"
  TABLES="$OUT/rl/eval/summary.md, $OUT/rl/eval/summary-forward.md"
else
  summary "GridSim eval ($WHAT)" gridsim "" --run "$OUT/rl"
  TABLES="$OUT/rl/eval/summary.md"
fi
python -c 'import sys; from prime_rl.monitor.plots import plot_diagnostics; plot_diagnostics(sys.argv[1], sys.argv[2])' \
  "$OUT/rl" "$OUT/rl/plots/diagnostics.png"
echo "demo finished in $((SECONDS - T0)) s; tables: $TABLES, plots: $OUT/rl/plots/reward.png, $OUT/rl/plots/diagnostics.png"
