"""scripts/demo_reasoning_gym.sh's command lines, with the heavy commands (inference, sft, rl, prime-rl) replaced by
stubs that record their arguments: the format SFT's demonstrations come from FORMAT_ARGS (chain_sum by default, no
question of the RL task), the evals and RL use rl.toml's task settings, SEED=N sets
the three RL seeds and its own output folder, and bad input (a SEED that is not a number, RL_ONLY=1 without an SFT
model) exits 2 before anything heavy runs. Fast."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "reasoning_gym"

STUB = """#!/usr/bin/env bash
set -eu
# one locked O_APPEND write per call: the background inference stub and the curl loop record at the same time
python3 -c 'import fcntl, json, os, sys
fd = os.open(os.environ["CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, (json.dumps(sys.argv[1:]) + "\\n").encode())
os.close(fd)' "$(basename "$0")" "$@"
case "$(basename "$0") ${1:-}" in
  "sft "*) mkdir -p "$OUT/sft/weights/step_20" && touch "$OUT/sft/weights/step_20/STABLE" ;;
  "rl "*) out=$(python3 -c 'import sys; a = sys.argv[1:]; print(a[a.index("--output-dir") + 1])' "$@")
          mkdir -p "$out/eval" && touch "$out/eval/step_0.jsonl" "$out/eval/step_30.jsonl" ;;
  "prime-rl eval") mkdir -p "$OUT/raw-eval/smollm2" && touch "$OUT/raw-eval/smollm2/step_0.jsonl" ;;
  "prime-rl smollm") mkdir -p "$2" && touch "$2/config.json" ;;
esac
"""


def _demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("prime-rl", "inference", "curl", "sft", "rl"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(stat.S_IRWXU)
    unset = ("SEED", "RL_OUT", "RL_ONLY", "SKIP_RAW", "RL_ARGS", "SFT_ARGS", "EVAL_ARGS", "FORMAT_ARGS")
    run_env = {k: v for k, v in os.environ.items() if k not in unset}
    run_env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CALLS=str(tmp_path / "calls.jsonl"),
                   OUT=str(tmp_path / "out"))  # fmt: skip
    run_env.update(env)
    return subprocess.run(["bash", str(REPO / "scripts" / "demo_reasoning_gym.sh")], cwd=REPO, env=run_env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _rl_env_args() -> dict:
    (src,) = tomllib.loads((EXAMPLE / "rl.toml").read_text())["orchestrator"]["train"]["source"]
    return src["env"]["args"]


def test_demo_uses_rl_tomls_task_settings_everywhere(tmp_path):
    r = _demo(tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    calls = _calls(tmp_path)
    (data,) = [c for c in calls if c[:2] == ["prime-rl", "sft-data"]]
    fmt = json.loads(data[data.index("--args") + 1])
    assert data[2] == "reasoning-gym" and fmt["datasets"] == ["chain_sum"] and fmt["answer_format"] == "tag"
    assert _rl_env_args()["datasets"] == ["aiw"] and _rl_env_args()["answer_format"] == "tag"  # RL's task, same format
    (ev_src,) = tomllib.loads((EXAMPLE / "eval.toml").read_text())["eval"]["source"]
    assert ev_src["env"]["args"] == _rl_env_args()  # the raw eval scores the items RL evaluates
    (sft,) = [c for c in calls if c[0] == "sft"]
    assert sft[sft.index("--data.path") + 1] == str(tmp_path / "out" / "sft.jsonl")
    (rl,) = [c[1:] for c in calls if c[0] == "rl"]
    cfg = parse_config(RLConfig, [a if a != str(tmp_path / "out" / "sft/weights/step_20") else str(REPO) for a in rl])
    assert (cfg.trainer.seed, cfg.orchestrator.seed, cfg.orchestrator.train.sampling.seed) == (0, 0, None)
    assert cfg.output_dir == tmp_path / "out" / "rl"
    (summary,) = [c for c in calls if c[:2] == ["prime-rl", "summary"]]
    assert "RL (step 30):SFT (step 0)" in summary and "SFT (step 0):raw" in summary
    assert summary[summary.index("--title") + 1].startswith("reasoning-gym aiw eval")  # the task of rl.toml


def test_format_args_choose_the_sft_demonstrations(tmp_path):
    args = {"datasets": ["spell_backward"], "num_train": 50, "num_eval": 10, "answer_format": "tag"}
    r = _demo(tmp_path, FORMAT_ARGS=json.dumps(args), SKIP_RAW="1")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (data,) = [c for c in _calls(tmp_path) if c[:2] == ["prime-rl", "sft-data"]]
    assert json.loads(data[data.index("--args") + 1]) == args


def test_seed_sets_the_three_rl_seeds_and_its_own_folder(tmp_path):
    (tmp_path / "out" / "sft" / "weights" / "step_20").mkdir(parents=True)
    (tmp_path / "out" / "sft" / "weights" / "step_20" / "STABLE").touch()
    r = _demo(tmp_path, SEED="2", RL_ONLY="1")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    calls = _calls(tmp_path)
    assert [c[0] for c in calls] == ["rl", "prime-rl"]  # RL_ONLY: no conversion, raw eval or SFT
    rl = calls[0][1:]
    assert rl[rl.index("--model.name") + 1] == str(tmp_path / "out" / "sft/weights/step_20")
    cfg = parse_config(RLConfig, [a if "sft/weights" not in a else str(REPO) for a in rl])
    assert (cfg.trainer.seed, cfg.orchestrator.seed, cfg.orchestrator.train.sampling.seed) == (2, 2, 2)
    assert cfg.output_dir == tmp_path / "out" / "rl-s2"
    assert "SFT (step 0):raw" not in calls[1]  # no raw eval in this OUT: a two-row table


@pytest.mark.parametrize("seed", ["one", "-1", "1.5", " "])
def test_demo_refuses_a_seed_that_is_not_a_number(tmp_path, seed):
    r = _demo(tmp_path, SEED=seed)
    assert r.returncode == 2 and "the RL seed must be a non-negative integer" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and _calls(tmp_path) == []


def test_rl_only_without_an_sft_model_exits_2(tmp_path):
    r = _demo(tmp_path, RL_ONLY="1")
    assert r.returncode == 2 and "no SFT model in" in r.stderr and "RL_ONLY=1" in r.stderr, r.stderr
    assert _calls(tmp_path) == []
