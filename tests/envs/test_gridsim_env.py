"""GridSim environment on its default data (the packaged ERCOT 2021-2024 days): splits, prompts, episodes,
demonstrations, the packaged file, synthetic days, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from prime_rl.envs import Task, load_env
from prime_rl.envs.gridsim import prompts
from prime_rl.envs.gridsim.battery import optimal_schedule
from prime_rl.envs.gridsim.data import PACKAGED, PriceTable, load_compact, load_packaged, save_compact
from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.gridsim.synthetic import synthetic_days


@pytest.fixture(scope="module")
def env():
    return load_env("gridsim")


def test_splits_sizes_disjoint_deterministic(env):
    train, ev = env.tasks("train"), env.tasks("eval")
    assert (len(train), len(ev)) == (2000, 200)
    eval_dates = {t.info["date"] for t in ev}
    assert len(eval_dates) == 200
    assert not eval_dates & {t.info["date"] for t in train}
    assert len({t.task_id for t in train}) == 2000
    assert [t.index for t in ev] == list(range(200))
    again = GridSimEnv()
    assert [t.task_id for t in again.tasks("eval")] == [t.task_id for t in ev]
    assert [t.task_id for t in GridSimEnv(seed=1).tasks("eval")] != [t.task_id for t in ev]
    t = ev[0]
    assert t.task_id == f"gridsim-{t.info['date']}-{t.info['point']}"
    with pytest.raises(KeyError, match="unknown split"):
        env.tasks("test")
    # num_train=None: every usable day off the eval dates; the default split is its first 2,000 (same draw)
    everything = GridSimEnv(num_train=None)
    full = [t.task_id for t in everything.tasks("train")]
    assert len(full) > 2000 and full[:2000] == [t.task_id for t in train]
    assert not eval_dates & {t.info["date"] for t in everything.tasks("train")}
    assert [t.task_id for t in everything.tasks("eval")] == [t.task_id for t in ev]


def test_synthetic_days_deterministic_and_plausible():
    a, b = synthetic_days(seed=3, days=60), synthetic_days(seed=3, days=60)
    assert (a.prices == b.prices).all() and (a.dates == b.dates).all()
    assert not (synthetic_days(seed=4, days=60).prices == a.prices).all()
    assert len(a) == 60 * 5
    full = synthetic_days()
    assert (full.prices < 0).any() and full.prices.max() > 500  # negative hours and spikes exist


def test_prompts_are_compact_and_state_the_ranks(env):
    task = env.tasks("eval")[0]
    system, user = task.messages
    for word in ("battery", "25 MWh", "21.25", "$2/MWh", "empty", "submit_schedule", "24 integers", "Score"):
        assert word in system["content"]  # role, battery, rules, tool, scoring
    assert len(system["content"].encode()) < 300
    assert len(user["content"].encode()) < 360
    prices = task.info["prices"]
    lines = user["content"].splitlines()
    assert len(lines) == 25 and lines[0].startswith(f"{task.info['date']} {task.info['point']} $/MWh")
    # each hour's line: price to the dollar and its rank in the day (r1 = cheapest), counted here by brute force
    for h in range(24):
        rank = 1 + sum(p < prices[h] or (p == prices[h] and k < h) for k, p in enumerate(prices))
        hour, price, r = lines[1 + h].split()
        assert hour == f"HE{h + 1:02d}" and r == f"r{rank}"
        assert abs(int(price) - prices[h]) <= 0.5
    # ties: the earlier hour ranks first (hand-worked)
    assert prompts.price_ranks([5.0, 3.0, 5.0, 1.0]) == [3, 2, 4, 1]
    assert prompts.price_order([5.0, 3.0, 5.0, 1.0]) == [4, 2, 1, 3]
    fn = task.tools[0]["function"]
    assert fn["name"] == "submit_schedule" and "strict" not in fn
    assert fn["parameters"]["properties"]["schedule"]["minItems"] == 24


def test_episode_last_valid_submission_counts(env):
    task = env.tasks("eval")[1]
    ep = env.episode(task)
    opt, _ = optimal_schedule(task.info["prices"])
    assert ep.verify().reward == 0.0  # nothing submitted
    text = ep.call_tool("submit_schedule", json.dumps({"schedule": opt}))
    assert "score 1.000" in text
    assert ep.call_tool("submit_schedule", {"schedule": [0] * 23}).startswith("error")  # invalid: ignored
    res = ep.verify()
    assert res.reward == 1.0 and res.metrics["exact"] == 1.0 and res.metrics["invalid_submissions"] == 1.0
    ep.call_tool("submit_schedule", {"schedule": [0] * 24})
    assert ep.verify().reward == 0.2
    warn = ep.call_tool("submit_schedule", {"schedule": [-1] + [0] * 23})
    assert "HE01(empty)" in warn and ep.verify().metrics["warnings"] == 1.0


@pytest.mark.parametrize(
    "name,args,expect",
    [
        ("submit_schedule", "{not json", "not valid JSON"),
        ("submit_schedule", "[1,2]", "must be a JSON object"),
        ("submit_schedule", {}, "missing argument 'schedule'"),
        ("submit_schedule", {"schedule": [2] * 24}, "HE01 is 2"),
        ("submit_schedule", {"schedule": "0" * 24}, "must be a list"),
        ("charge", {}, "unknown tool"),
    ],
)
def test_malformed_calls_score_zero(env, name, args, expect):
    ep = env.episode(env.tasks("eval")[2])
    assert expect in ep.call_tool(name, args)
    assert ep.verify().reward == 0.0


def test_episode_from_row_info_alone_or_task_id(env):
    task = env.tasks("train")[5]
    bare = GridSimEnv(data_dir=None, num_train=1, num_eval=1)  # any instance can rebuild from info
    ep = bare.episode(Task(task.task_id, "train", 0, task.messages, task.tools, {"prices": task.info["prices"]}))
    assert ep.prices == task.info["prices"]
    ep2 = env.episode(Task(task.task_id, "train", 0, task.messages, task.tools, {}))
    assert ep2.prices == task.info["prices"]
    with pytest.raises(KeyError, match="no such day"):
        env.episode(Task("gridsim-1999-01-01-HB_NORTH", "train", 0, [], [], {}))


def test_sft_examples_solve_their_tasks(env):
    ex = env.sft_examples("eval")[:20]
    for e in ex:
        m = e["messages"]
        assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "assistant"]
        call = m[2]["tool_calls"][0]
        assert call["function"]["name"] == "submit_schedule" and " " not in call["function"]["arguments"]
        assert m[3]["tool_call_id"] == call["id"] and "score 1.000" in m[3]["content"]
        sched = json.loads(call["function"]["arguments"])["schedule"]
        task = next(t for t in env.tasks("eval") if t.task_id == e["task_id"])
        ep = env.episode(task)
        ep.call_tool("submit_schedule", {"schedule": sched})
        assert ep.verify().reward == 1.0


def test_cli_help_is_light():
    code = (
        "import sys; from prime_rl.cli.gridsim import main\n"
        "try: main(['--help'])\nexcept SystemExit: pass\n"
        "assert not {'torch','vllm','transformers','numpy'} & set(sys.modules), 'heavy import'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "baseline" in out.stdout and "sft-data" in out.stdout


def test_cli_sft_data_and_baseline(tmp_path, capsys):
    from prime_rl.cli.gridsim import main

    main(["sft-data", "--split", "eval", str(tmp_path / "d.jsonl")])  # the output file as a bare argument, last
    rows = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert len(rows) == 200 and rows[0]["tools"][0]["function"]["name"] == "submit_schedule"
    main(["baseline", "--policy", "idle", "--out", str(tmp_path / "s.jsonl")])
    assert "mean 0.2000" in capsys.readouterr().out
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 200


def test_cli_baseline_default_output_names_the_data(tmp_path, monkeypatch, capsys):
    """Synthetic and real-data scores get different default files, so one never overwrites the other."""
    from prime_rl.cli.gridsim import main

    monkeypatch.chdir(tmp_path)
    for flags, kind in (([], "ercot"), (["--synthetic"], "synthetic")):
        main(["baseline", "--policy", "idle", *flags])
        out = tmp_path / f"outputs/gridsim/baseline-idle-eval-{kind}.jsonl"
        assert f"per-task scores: {out.relative_to(tmp_path)}" in capsys.readouterr().out
        assert len(out.read_text().splitlines()) == 200 and not list(out.parent.glob("*.tmp*"))


def test_packaged_ercot_file_is_small_documented_and_real():
    """The shipped prices: under 1 MB, README with source report, years and attribution, and facts checked by
    hand against ERCOT's files (7,305 (date, hub) days of 2021-2024 less 8 clock-change dates x 5 hubs)."""
    assert PACKAGED.stat().st_size < 1_000_000
    readme = (PACKAGED.parent / "README.md").read_text()
    for word in ("NP4-180-ER", "2021", "2024", "ERCOT", "Electric Reliability Council of Texas", "DAMLZHBSPP_2024"):
        assert word in readme
    t = load_packaged()
    assert len(t) == 1461 * 5 - 40 and len(t.dropped) == 40
    assert {d.split()[0] for d in t.dropped} == {"2021-03-14", "2021-11-07", "2022-03-13", "2022-11-06",
                                                  "2023-03-12", "2023-11-05", "2024-03-10", "2024-11-03"}  # fmt: skip
    assert (t.dates[0], t.dates[-1]) == ("2021-01-01", "2024-12-31") and (t.dates[:-1] <= t.dates[1:]).all()
    i = int(np.nonzero((t.dates == "2021-01-01") & (t.points == "HB_BUSAVG"))[0][0])
    assert t.prices[i, 0] == 18.24  # HE01 as ERCOT published it
    assert t.prices.max() == 9000.01  # February 2021: the offer cap plus a cent
    west = load_packaged(("HB_WEST",))
    assert len(west) == 1461 - 8 and set(west.points.tolist()) == {"HB_WEST"}
    assert (west.prices == t.prices[t.points == "HB_WEST"]).all()
    with pytest.raises(ValueError, match="data_dir"):
        load_packaged(("LZ_WEST",))


def test_default_data_gives_the_recorded_eval_numbers(env):
    """Numbers recorded in docs/envs.md on the 200 eval days (first measured on ERCOT's xlsx files)."""
    from prime_rl.envs.gridsim.baselines import run_baseline

    assert env.synthetic is False and env.data_dir is None
    greedy = np.array([r["score"] for r in run_baseline(env, "greedy", "eval")])
    assert round(float(greedy.mean()), 4) == 0.7974 and round(float(greedy.std(ddof=1) / np.sqrt(200)), 4) == 0.0236
    assert len(GridSimEnv(num_train=None).tasks("train")) == 6171


def test_compact_file_roundtrip_and_refusals(tmp_path):
    table = PriceTable(
        dates=np.array(["2020-02-29", "2020-02-29", "2020-03-01"], dtype="U10"),
        points=np.array(["HB_NORTH", "HB_WEST", "HB_NORTH"], dtype="U16"),
        prices=np.array([np.arange(24) * 1.25 - 3.5, np.full(24, 9000.01), np.full(24, -0.07)]),
        dropped=np.array(["2020-03-08 HB_NORTH 23"], dtype="U40"),
    )
    back = load_compact(save_compact(table, tmp_path / "p.npz"), ("HB_NORTH", "HB_WEST"))
    for k in ("dates", "points", "prices", "dropped"):
        assert np.array_equal(getattr(back, k), getattr(table, k)), k
    north = load_compact(tmp_path / "p.npz", ("HB_NORTH",))
    assert north.dates.tolist() == ["2020-02-29", "2020-03-01"] and len(north.dropped) == 1
    assert len(load_compact(tmp_path / "p.npz", ("HB_WEST",)).dropped) == 0
    table.prices[0, 0] = 1.001  # not a whole cent: would not read back equal
    with pytest.raises(ValueError, match="cents"):
        save_compact(table, tmp_path / "q.npz")


def test_synthetic_and_data_dir_are_exclusive_and_data_seed_needs_synthetic(tmp_path):
    syn = GridSimEnv(synthetic=True, num_train=5, num_eval=5)
    assert syn.table.dropped.size == 0 and syn.tasks("eval")[0].info["date"] >= "2021-01-01"
    assert not np.array_equal(syn.table.prices[:10], load_packaged().prices[:10])
    with pytest.raises(ValueError, match="not both"):
        GridSimEnv(synthetic=True, data_dir=tmp_path)
    with pytest.raises(ValueError, match="synthetic=True"):
        GridSimEnv(data_seed=3)
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        _ = GridSimEnv(data_dir=tmp_path / "nope").table
