"""Argmax (temperature 0) scores of a GridSim RL run's start model and last policy on the 200 eval days.

    python examples/gridsim/argmax.py outputs/gridsim-exp/default-s0/rl

starts a vLLM inference server per model and scores it with `prime-rl eval` (one rollout per day at temperature 0,
up to 4 turns, as benchmarks/peer_trl.py scores models), writes RUN/argmax/argmax_sft.jsonl and argmax_rl.jsonl
(`task_id`, `score`) and prints both means and the paired difference. `--sft-scores FILE` reuses the start model's
scores from an earlier run's argmax_sft.jsonl (same start model: the same folder, or a folder whose `*.safetensors`
files have the same bytes, e.g. a clone's copy; refused otherwise).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.peer_trl import score  # noqa: E402

from prime_rl.monitor.score_stats import mean_se, paired  # noqa: E402


def weights_digest(model: Path) -> dict[str, str]:
    """`file name -> sha256` of a model folder's `*.safetensors` files (empty when it has none)."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(model.glob("*.safetensors"))}


def reuse_sft(path: Path, start: Path) -> dict[str, float]:
    """`task_id -> score` of an earlier argmax_sft.jsonl, whose run (two folders up) must have started from `start`:
    the same folder, or one whose `*.safetensors` files are byte for byte those of `start`.

    Raises:
        SystemExit: the earlier run started from another model (its scores would be another model's).
    """
    earlier = tomllib.loads((path.parents[1] / "configs" / "orchestrator.toml").read_text())
    other = Path(earlier["model"]["name"]).resolve()
    if other != start and (not (mine := weights_digest(start)) or weights_digest(other) != mine):
        raise SystemExit(f"--sft-scores {path}: that run started from {earlier['model']['name']}, this one from "
                         f"{start}, and their *.safetensors files differ")
    return {r["task_id"]: r["score"] for r in map(json.loads, path.read_text().splitlines())}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run", type=Path, help="an rl run directory (its configs/ and weights/)")
    p.add_argument("--sft-scores", type=Path, help="argmax_sft.jsonl of an earlier run from the same start model")
    a = p.parse_args()
    run = a.run.resolve()
    cfg = tomllib.loads((run / "configs" / "orchestrator.toml").read_text())
    start = Path(cfg["model"]["name"]).resolve()
    last = sorted((run / "weights").glob("step_*/STABLE"), key=lambda q: int(q.parent.name.split("_")[1]))[-1].parent
    opts = argparse.Namespace(data_dir=None, eval_rollouts=1, temperature=0.0, eval_days=None)
    res = {}
    for name, model in (("argmax_sft", start), ("argmax_rl", last)):
        if name == "argmax_sft" and a.sft_scores is not None:
            scores = reuse_sft(a.sft_scores.resolve(), start)
        else:
            scores = score(model, opts, run / "argmax" / name)
        (run / "argmax").mkdir(exist_ok=True)
        (run / "argmax" / f"{name}.jsonl").write_text("".join(
            json.dumps({"task_id": t, "score": s}) + "\n" for t, s in sorted(scores.items())))  # fmt: skip
        res[name] = scores
        print(f"{name} ({model}): {mean_se(list(scores.values())).fmt()}", flush=True)
    d = paired(res["argmax_rl"], res["argmax_sft"])
    print(f"argmax RL - SFT (paired, {d.count} days): {d.mean:+.4f} ± {d.se:.4f}")


if __name__ == "__main__":
    main()
