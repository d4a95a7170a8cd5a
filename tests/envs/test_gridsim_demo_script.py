"""scripts/demo.sh's command lines, with the heavy commands (tiny-model, sft, rl, summary, ...) replaced by stubs that
record their arguments: the forward split's flags reach every command, `rl` gets both eval sources on this run's
rows, and two tables are asked for (one per eval source); `FORWARD_FROM=` gives the one-table demo. Fast."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[2]

STUB = """#!/usr/bin/env bash
set -eu
# one locked O_APPEND write per call, so calls made at the same time never interleave
python3 -c 'import fcntl, json, os, sys
fd = os.open(os.environ["CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, (json.dumps(sys.argv[1:]) + "\\n").encode())
os.close(fd)' "$(basename "$0")" "$@"
case "$(basename "$0") ${1:-}" in
  "sft "*) mkdir -p "$OUT/sft/weights/step_2" && touch "$OUT/sft/weights/step_2/STABLE" ;;
  "rl "*) mkdir -p "$OUT/rl/eval" "$OUT/rl/configs"
          printf '[eval.sampling]\\ntemperature = 0.5\\n' > "$OUT/rl/configs/orchestrator.toml"
          touch "$OUT/rl/eval/step_0.jsonl" "$OUT/rl/eval/step_1.jsonl" ;;
esac
"""


def _demo(tmp_path: Path, **env: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("prime-rl", "env-server", "gridsim", "sft", "rl"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(stat.S_IRWXU)
    # `python` runs for real (the demo reads the rl configs with it) except the closing plot
    (bin_dir / "python").write_text(f'#!/usr/bin/env bash\ncase "$*" in *plot_diagnostics*) exit 0 ;; esac\n'
                                    f'exec {sys.executable} "$@"\n')  # fmt: skip
    (bin_dir / "python").chmod(stat.S_IRWXU)
    calls = tmp_path / "calls.jsonl"
    unset = ("DATA_DIR", "SYNTHETIC", "SFT_MODEL", "RL_ARGS", "SFT_ARGS", "FORWARD_FROM", "RL_TRAIN_FROM")
    run_env = {k: v for k, v in os.environ.items() if k not in unset}
    run_env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CALLS=str(calls), OUT=str(tmp_path / "out"))
    run_env.update(env)
    r = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], cwd=REPO, env=run_env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [json.loads(x) for x in calls.read_text().splitlines()]


def _rl_config(calls: list[list[str]]) -> RLConfig:
    (argv,) = [c[1:] for c in calls if c[0] == "rl"]
    return parse_config(RLConfig, argv, prog="rl")


@pytest.mark.parametrize("forward_from", ["2024-01-01", "2023-07-01"])
def test_forward_demo_passes_the_cut_off_and_asks_for_two_tables(tmp_path, forward_from):
    calls = _demo(tmp_path, **({} if forward_from == "2024-01-01" else {"FORWARD_FROM": forward_from}))
    out = tmp_path / "out"
    write = [c for c in calls if c[:2] == ["env-server", "write"]]
    # RL's rows: the training days of the year before the cut-off; the SFT demonstrations: every training day
    train_from = {"2024-01-01": "2023-01-01", "2023-07-01": "2022-07-01"}[forward_from]
    assert write == [["env-server", "write", "gridsim", f"{out}/gym-root", "--forward-from", forward_from,
                      "--train-from", train_from]]  # fmt: skip
    sft_data = [c for c in calls if c[:2] == ["gridsim", "sft-data"]]
    assert len(sft_data) == 1 and sft_data[0][sft_data[0].index("--forward-from") + 1] == forward_from
    assert "--train-from" not in sft_data[0]
    baselines = [(c[c.index("--policy") + 1], c[c.index("--split") + 1], c[c.index("--out") + 1])
                 for c in calls if c[:2] == ["gridsim", "baseline"]]  # fmt: skip
    assert sorted(baselines) == sorted(
        [(p, "eval", f"{out}/baselines/{p}.jsonl") for p in ("idle", "greedy", "optimal")]
        + [(p, "forward", f"{out}/baselines/{p}-forward.jsonl") for p in ("idle", "greedy", "optimal")]
    )
    assert all(c[c.index("--forward-from") + 1] == forward_from for c in calls if c[:2] == ["gridsim", "baseline"])
    cfg = _rl_config(calls)
    rows = f"{out}/gym-root/resources_servers/gridsim_v1/data"
    assert cfg.env_server.forward_from.isoformat() == forward_from
    assert cfg.env_server.train_from.isoformat() == train_from
    assert [str(s.env.taskset.dataset) for s in cfg.orchestrator.train.source] == [f"{rows}/train.jsonl"]
    ev = {s.name: s.env.taskset for s in cfg.orchestrator.eval.source}
    assert set(ev) == {"gridsim", "gridsim-forward"}
    assert ev["gridsim"].eval_dataset is None and str(ev["gridsim"].dataset) == f"{rows}/train.jsonl"
    assert str(ev["gridsim-forward"].eval_dataset) == f"{rows}/forward.jsonl"
    # RL's settings are rl.toml's: only the rows and the eval sources differ from it
    (argv,) = [c[1:] for c in calls if c[0] == "rl"]
    drop = {"@", "--orchestrator.train.source", "--orchestrator.eval.source", "--env-server.forward-from",
            "--env-server.train-from"}
    rest = [a for i, a in enumerate(argv) if a not in drop and (i == 0 or argv[i - 1] not in drop)]
    plain = parse_config(RLConfig, ["@", "examples/gridsim/rl.toml", *rest], prog="rl")
    a, b = cfg.model_dump(mode="json"), plain.model_dump(mode="json")
    for d in (a, b):
        d["env_server"].pop("forward_from")
        d["env_server"].pop("train_from")
        d["orchestrator"]["eval"].pop("source")
        d["orchestrator"]["train"].pop("source")
    assert a == b
    summaries = [c for c in calls if c[:2] == ["prime-rl", "summary"]]
    assert len(summaries) == 2
    entries = [[c[i + 1] for i, a in enumerate(c) if a == "--entry"] for c in summaries]
    assert f"SFT (step 0)={out}/rl/eval/step_0.jsonl#gridsim" in entries[0]
    assert f"RL (step 1)={out}/rl/eval/step_1.jsonl#gridsim" in entries[0]
    assert f"greedy={out}/baselines/greedy.jsonl" in entries[0]
    assert f"RL (step 1)={out}/rl/eval/step_1.jsonl#gridsim-forward" in entries[1]
    assert f"optimum={out}/baselines/optimal-forward.jsonl" in entries[1]
    assert summaries[1][summaries[1].index("--out") + 1] == f"{out}/rl/eval/summary-forward.md"
    assert summaries[0][summaries[0].index("--run") + 1] == f"{out}/rl" and "--run" not in summaries[1]
    for c in summaries:
        assert ["--compare", "RL (step 1):SFT (step 0)"] == c[c.index("--compare"):c.index("--compare") + 2]


def test_rl_train_from_can_be_moved_or_dropped(tmp_path):
    every = _demo(tmp_path / "a", RL_TRAIN_FROM="")
    write = [c for c in every if c[:2] == ["env-server", "write"]]
    assert write == [["env-server", "write", "gridsim", f"{tmp_path}/a/out/gym-root", "--forward-from", "2024-01-01"]]
    assert _rl_config(every).env_server.train_from is None  # the run's config says what RL trained on
    calls = _demo(tmp_path / "b", RL_TRAIN_FROM="2023-07-01")
    assert [c for c in calls if c[:2] == ["env-server", "write"]][0][-2:] == ["--train-from", "2023-07-01"]
    assert _rl_config(calls).env_server.train_from.isoformat() == "2023-07-01"


@pytest.mark.parametrize("var, value", [("FORWARD_FROM", "2024-13-01"), ("RL_TRAIN_FROM", "2023/01/01")])
def test_demo_refuses_a_date_that_is_not_one(tmp_path, var, value):
    r = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, var: value, "OUT": str(tmp_path)}, timeout=60)  # fmt: skip
    assert r.returncode == 2 and f"demo: {var}={value} is not a date YYYY-MM-DD" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_demo_without_forward_split_is_the_one_table_demo(tmp_path):
    calls = _demo(tmp_path, FORWARD_FROM="")
    assert not any("--forward-from" in c or "forward" in c or "gridsim-forward" in " ".join(c) for c in calls)
    assert len([c for c in calls if c[:2] == ["gridsim", "baseline"]]) == 3
    cfg = _rl_config(calls)
    assert cfg.env_server.forward_from is None and cfg.orchestrator.eval.source is None
    summaries = [c for c in calls if c[:2] == ["prime-rl", "summary"]]
    assert len(summaries) == 1 and "--run" in summaries[0]
