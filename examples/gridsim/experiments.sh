#!/usr/bin/env bash
# GridSim RL variants, all from ONE SFT model, each an RL phase of `make demo` (scripts/demo.sh
# with SFT_MODEL reused): eval of the SFT model and of the last policy on the 200 eval days (T=0.5, 4 rollouts per
# day), the table with paired differences in OUT/rl/eval/summary.md and the per-step diagnostics plot in
# OUT/rl/plots/diagnostics.png.
#
#   bash examples/gridsim/experiments.sh sft                 # make demo once (seed 0): its SFT model
#                                                            #   outputs/demo/sft/weights/step_1000 is reused below
#   bash examples/gridsim/experiments.sh screen              # every candidate below, RL seed 0
#   bash examples/gridsim/experiments.sh confirm NAME        # one candidate, RL seeds 1 and 2 (seed 0 from screen)
#   bash examples/gridsim/experiments.sh one NAME SEED       # one candidate, one RL seed
#   bash examples/gridsim/experiments.sh demos               # three full make-demo RL phases (seeds 0 1 2), defaults
#   bash examples/gridsim/experiments.sh trl                 # TRL 1.16 GRPOTrainer, seeds 0 1 2 (benchmarks/peer_trl.py)
#   bash examples/gridsim/experiments.sh table               # one line per run: SFT, RL, RL - SFT +- SE (paired),
#                                                            #   RL - pooled SFT, diagnostics (exp_table.py)
#
# Long runs: on a shared machine run them with `nice -n 10` and record that the CPU was shared.
set -euo pipefail
cd "$(dirname "$0")/../.."
SFT=${SFT_MODEL:-outputs/demo/sft/weights/step_1000}
ROOT=${ROOT:-outputs/gridsim-exp}

# name -> extra rl flags ("default" = examples/gridsim/rl.toml as is)
declare -A CAND=(
  [default]=""
  [std]="--orchestrator.advantage.std-normalize true"
  [onpolicy]="--orchestrator.max-async-level 0"
  [nokl]="--trainer.loss.kl-tau 0 --trainer.loss.trust-region-delta 1e9"
  [trl-like]="--orchestrator.advantage.std-normalize true --orchestrator.max-async-level 0 --trainer.loss.kl-tau 0"
  [lr2e-4]="--trainer.optim.lr 2e-4"
  [lr3e-4]="--trainer.optim.lr 3e-4"
  [steps100]="--max-steps 100"
  [batch64]="--orchestrator.batch-size 64 --orchestrator.concurrency.max-inflight 64"
  [group16]="--orchestrator.train.group-size 16 --orchestrator.batch-size 64"
  [seqmean]="--orchestrator.loss-aggregation seq-mean-token-mean"
  [rloo]="--orchestrator.advantage.type rloo"
  [maxrl]="--orchestrator.advantage.type maxrl"
  [t1]="--orchestrator.train.sampling.temperature 1.0"
  [lora]="--trainer.model.lora.rank 32 --trainer.model.lora.alpha 64 --trainer.optim.lr 1e-3"
  [std-b64]="--orchestrator.advantage.std-normalize true --orchestrator.batch-size 64 --orchestrator.concurrency.max-inflight 64"
  [std-refkl]="--orchestrator.advantage.std-normalize true --trainer.loss.ref-kl-coef 0.01"
  [std-b64-lr1.5e-4]="--orchestrator.advantage.std-normalize true --orchestrator.batch-size 64 --orchestrator.concurrency.max-inflight 64 --trainer.optim.lr 1.5e-4"
  [std-g16]="--orchestrator.advantage.std-normalize true --orchestrator.train.group-size 16 --orchestrator.batch-size 64 --orchestrator.concurrency.max-inflight 64"
)

run() {  # run NAME SEED
  local name=$1 seed=$2
  SFT_MODEL=$SFT RL_SEED=$seed OUT=$ROOT/$name-s$seed RL_ARGS="${CAND[$name]}" bash scripts/demo.sh \
    > "$ROOT/$name-s$seed.log" 2>&1
  echo "$name seed $seed: $(grep -E '^\| \*?\*?RL' "$ROOT/$name-s$seed/rl/eval/summary.md" | head -1)"
}

mkdir -p "$ROOT"
case "${1:-}" in
  sft) bash scripts/demo.sh ;;
  screen) for n in "${!CAND[@]}"; do run "$n" 0; done ;;
  confirm) for s in 1 2; do run "$2" "$s"; done ;;
  one) run "$2" "${3:-0}" ;;                          # one NAME [SEED]
  demos) for s in 0 1 2; do run default "$s"; done ;;
  trl) python benchmarks/peer_trl.py --model "$SFT" --seeds 0 1 2 --out "$ROOT/trl" ;;
  table) python examples/gridsim/exp_table.py "$ROOT" --md ;;
  *) sed -n 2,15p "$0"; exit 2 ;;
esac
