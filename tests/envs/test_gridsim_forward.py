"""GridSim's forward-in-time split (`forward_from`): every forward day after every training day, sizes, determinism,
the rows writer, the CLI options, and baselines on forward days recomputed here from the packaged file's raw
arrays with this file's own battery simulation, greedy rule and dynamic programme."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prime_rl.envs.gridsim.data import PACKAGED
from prime_rl.envs.gridsim.env import GridSimEnv

CUT = "2024-01-01"


@pytest.fixture(scope="module")
def fwd():
    return GridSimEnv(forward_from=CUT, num_train=None)


def _dates(tasks) -> list[str]:
    return [t.info["date"] for t in tasks]


def _raw_days() -> dict[tuple[str, str], np.ndarray]:
    """{(date, hub): (24,) $/MWh} straight from the packaged file's arrays (days since 1970, hub index, cents)."""
    with np.load(PACKAGED, allow_pickle=False) as z:
        dates = (np.datetime64("1970-01-01", "D") + z["day"].astype("timedelta64[D]")).astype(str)
        hubs = z["point_names"][z["point"]]
        return {(d, str(h)): c / 100.0 for d, h, c in zip(dates, hubs, z["cents"], strict=True)}


# The battery of GridSim, written out again: 4 units of 25 MWh, one unit an hour, empty at the start; a charge pays
# 25 x price, a sale earns 21.25 x (price - 2); a move the charge forbids is idle.
def _profit(prices, schedule) -> float:
    soc, total = 0, 0.0
    for p, a in zip(prices, schedule, strict=True):
        if (a == 1 and soc == 4) or (a == -1 and soc == 0):
            a = 0
        soc += a
        total += -25.0 * p if a == 1 else 21.25 * (p - 2.0) if a == -1 else 0.0
    return total


def _optimum(prices) -> float:
    """Forward DP over the state of charge: best[s] = most money after the hours so far, holding s units."""
    best = [0.0] + [-np.inf] * 4
    for p in prices:
        new = list(best)  # idle
        for s in range(5):
            if s < 4:
                new[s + 1] = max(new[s + 1], best[s] - 25.0 * p)
            if s > 0:
                new[s - 1] = max(new[s - 1], best[s] + 21.25 * (p - 2.0))
        best = new
    return max(best)


def _greedy(prices) -> list[int]:
    """Charge in the 4 cheapest hours, sell in the 4 dearest others (ties: earlier hour), skipping what the charge
    forbids."""
    order = np.lexsort((np.arange(24), prices))  # by price, then hour
    cheap = set(order[:4].tolist())
    dear = [h for h in np.lexsort((np.arange(24), -np.asarray(prices))).tolist() if h not in cheap][:4]
    out, soc = [], 0
    for h in range(24):
        a = 1 if h in cheap else -1 if h in dear else 0
        if (a == 1 and soc == 4) or (a == -1 and soc == 0):
            a = 0
        soc += a
        out.append(a)
    return out


def _score(profit: float, best: float) -> float:
    return min(1.0, max(0.0, 0.2 + 0.8 * profit / best))


def test_forward_days_come_after_every_training_day(fwd):
    train, ev, fw = fwd.tasks("train"), fwd.tasks("eval"), fwd.tasks("forward")
    assert max(_dates(train)) < CUT <= min(_dates(fw)) and max(_dates(ev)) < CUT
    assert max(_dates(train)) < min(_dates(fw))  # the property itself: no forward day on or before a training day
    assert {t.split for t in fw} == {"forward"} and [t.index for t in fw] == list(range(200))
    # sizes: 200 forward and 200 eval days on distinct dates, date-disjoint from each other and from training
    assert (len(fw), len(set(_dates(fw))), len(ev), len(set(_dates(ev)))) == (200, 200, 200, 200)
    assert not set(_dates(train)) & (set(_dates(ev)) | set(_dates(fw)))
    assert len({t.task_id for t in train + ev + fw}) == len(train) + 400
    # forward days spread over the forward period's months like the eval days (200 over 12 months: 16 or 17 each)
    per_month = np.unique([d[:7] for d in _dates(fw)], return_counts=True)[1]
    assert len(per_month) == 12 and set(per_month.tolist()) <= {16, 17}


def test_forward_split_sizes_match_a_count_from_the_raw_file(fwd):
    """The training pool: every (date, hub) before the cut-off whose optimum beats $500, off the 200 eval dates."""
    days = _raw_days()
    usable = {k for k, p in days.items() if _optimum(p) > 500.0}
    eval_dates = set(_dates(fwd.tasks("eval")))
    want = {k for k in usable if k[0] < CUT and k[0] not in eval_dates}
    got = {(t.info["date"], t.info["point"]) for t in fwd.tasks("train")}
    assert got == want and len(got) == 4364
    assert {(t.info["date"], t.info["point"]) for t in fwd.tasks("forward")} <= {k for k in usable if k[0] >= CUT}
    # the default size: the first 2,000 of the same draw
    default = GridSimEnv(forward_from=CUT).tasks("train")
    assert [t.task_id for t in default] == [t.task_id for t in fwd.tasks("train")][:2000]


def test_forward_split_is_seeded_and_leaves_the_default_split_alone(fwd):
    again = GridSimEnv(forward_from=CUT, num_train=None)
    for split in ("train", "eval", "forward"):
        assert [t.task_id for t in again.tasks(split)] == [t.task_id for t in fwd.tasks(split)], split
    other = GridSimEnv(forward_from=CUT, seed=1)
    assert [t.task_id for t in other.tasks("forward")] != [t.task_id for t in fwd.tasks("forward")]
    assert max(_dates(other.tasks("train"))) < min(_dates(other.tasks("forward")))
    # a date object gives the same split; another cut-off moves the boundary
    import datetime as dt

    assert [t.task_id for t in GridSimEnv(forward_from=dt.date(2024, 1, 1)).tasks("forward")] == [
        t.task_id for t in fwd.tasks("forward")
    ]
    mid = GridSimEnv(forward_from="2023-07-01")
    assert max(_dates(mid.tasks("train"))) < "2023-07-01" <= min(_dates(mid.tasks("forward")))
    # without the option there is no forward split, and train/eval are the interpolation split's
    plain = GridSimEnv()
    assert plain.splits == ("train", "eval") and fwd.splits == ("train", "eval", "forward")
    with pytest.raises(KeyError, match="forward_from"):
        plain.tasks("forward")
    assert max(_dates(plain.tasks("eval"))) >= CUT  # the interpolation eval spans all four years


@pytest.mark.parametrize("value, msg", [("2024-13-01", "not a date"), ("tomorrow", "not a date"),
                                        ("2030-01-01", "no usable day on or after"),
                                        ("2020-01-01", "no usable day before")])  # fmt: skip
def test_bad_cut_offs_are_refused(value, msg):
    with pytest.raises(ValueError, match=msg):
        GridSimEnv(forward_from=value).tasks("train")


def test_forward_baselines_recomputed_independently(tmp_path, capsys):
    """`gridsim baseline --split forward`: idle, greedy and optimum on the forward days equal this file's own
    battery, greedy rule and DP on the packaged file's prices, task by task."""
    from prime_rl.cli.gridsim import main

    days = _raw_days()
    for policy in ("idle", "greedy", "optimal"):
        out = tmp_path / f"{policy}.jsonl"
        main(["baseline", "--policy", policy, "--split", "forward", "--forward-from", CUT, "--out", str(out)])
        line = capsys.readouterr().out
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(rows) == 200 and f"split forward forward_from {CUT}" in line
        want = []
        for r in rows:
            date, hub = r["task_id"][len("gridsim-"):len("gridsim-") + 10], r["task_id"][len("gridsim-") + 11:]
            assert date >= CUT
            p = days[(date, hub)]
            best = _optimum(p)
            mine = {"idle": 0.0, "greedy": _profit(p, _greedy(p)), "optimal": best}[policy]
            assert r["optimal_profit"] == pytest.approx(best, abs=0.006)
            want.append(_score(mine, best))
        got = np.array([r["score"] for r in rows])
        np.testing.assert_allclose(got, want, atol=1e-9)
        mean, se = float(np.mean(want)), float(np.std(want, ddof=1) / np.sqrt(len(want)))
        assert f"mean {mean:.4f} se {se:.4f}" in line
        if policy == "idle":
            assert mean == pytest.approx(0.2)
        if policy == "optimal":
            assert mean == pytest.approx(1.0)


def test_cli_forward_options(tmp_path, monkeypatch, capsys):
    from prime_rl.cli.gridsim import main

    monkeypatch.chdir(tmp_path)
    # the default output file names the cut-off, so forward-split scores never overwrite the default split's
    main(["baseline", "--policy", "idle", "--split", "eval", "--forward-from", CUT])
    out = Path(f"outputs/gridsim/baseline-idle-eval-ercot-from-{CUT}.jsonl")
    assert f"per-task scores: {out}" in capsys.readouterr().out and len(out.read_text().splitlines()) == 200
    assert max(json.loads(x)["task_id"][8:18] for x in out.read_text().splitlines()) < CUT
    main(["sft-data", "--split", "train", "--forward-from", CUT, "--num-train", "all", "demos.jsonl"])
    rows = [json.loads(x) for x in Path("demos.jsonl").read_text().splitlines()]
    assert len(rows) == 4364 and max(r["task_id"][8:18] for r in rows) < CUT
    # refusals exit 2 and name the flag
    for argv, msg in ((["baseline", "--split", "forward"], "--split forward needs --forward-from"),
                      (["baseline", "--forward-from", "2024-02-30"], "forward_from")):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err


def test_prime_rl_sft_data_forward(tmp_path):
    """`prime-rl sft-data gridsim OUT --split forward --args {"forward_from": ...}`."""
    out = tmp_path / "f.jsonl"
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "sft-data", "gridsim", str(out), "--split",
                        "forward", "--args", json.dumps({"forward_from": CUT})], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 200 and {r["split"] for r in rows} == {"forward"}
    assert min(r["task_id"][8:18] for r in rows) >= CUT


def test_rows_writer_writes_the_forward_rows(tmp_path):
    import yaml

    from prime_rl.envs.nemo_gym.rows import read_rows, write_server

    root = write_server("gridsim", tmp_path, {"forward_from": CUT, "num_train": 50})
    rows = {s: read_rows(root / "data" / f"{s}.jsonl") for s in ("train", "eval", "forward")}
    assert [len(rows[s]) for s in ("train", "eval", "forward")] == [50, 200, 200]
    assert max(r["info"]["date"] for r in rows["train"] + rows["eval"]) < CUT <= min(
        r["info"]["date"] for r in rows["forward"]
    )
    assert {r["split"] for r in rows["forward"]} == {"forward"}
    assert json.loads((root / "server.json").read_text())["env_args"] == {"forward_from": CUT, "num_train": 50}
    cfg = yaml.safe_load((root / "configs" / "gridsim_v1.yaml").read_text())
    datasets = cfg["gridsim_v1"]["resources_servers"]["gridsim_v1"]["datasets"]
    assert [(d["name"], d["type"]) for d in datasets] == [("train", "train"), ("eval", "validation"),
                                                          ("forward", "validation")]  # fmt: skip
    assert all((tmp_path / d["jsonl_fpath"]).is_file() for d in datasets)
    # written again without the cut-off: no forward rows of the earlier write are left to be evaluated
    write_server("gridsim", tmp_path, {"num_train": 50})
    assert sorted(p.name for p in (root / "data").iterdir()) == ["eval.jsonl", "train.jsonl"]


def test_env_server_write_and_rl_launcher_pass_the_cut_off(tmp_path, capsys):
    from tests.envs.test_env_server_cli import _parse
    from tests.launcher.test_launcher_preflight import nemo_cfg

    from prime_rl.launcher import envserver

    got = _parse(["write", "gridsim", str(tmp_path), "--forward-from", CUT])
    assert got.env_args() == {"forward_from": CUT}
    for env in ("reverse-text", "http://127.0.0.1:8200"):
        with pytest.raises(SystemExit) as e:
            _parse(["write", env, str(tmp_path), "--forward-from", CUT])
        assert e.value.code == 2 and "--forward-from applies to" in capsys.readouterr().err
    # `rl` writes missing rows with the [env_server] cut-off
    cfg = nemo_cfg(tmp_path, "--env-server.forward-from", CUT)
    (plan,) = envserver.plan_env_servers(cfg, probe=lambda url: False)
    envserver.write_rows(cfg, plan, tmp_path / "write.log", timeout_s=300)
    data = plan.write_root / "resources_servers" / "gridsim_v1" / "data"
    assert f"--forward-from {CUT}" in (tmp_path / "write.log").read_text()
    assert min(json.loads(x)["info"]["date"] for x in (data / "forward.jsonl").read_text().splitlines()) >= CUT


RECENT = "2023-01-01"


def test_train_from_keeps_the_recent_training_days_and_nothing_else(fwd):
    """`train_from`: the train split is the same draw cut to its days on or after the date (order kept); eval and
    forward are the split's without it. Counted again from the packaged file's raw arrays."""
    recent = GridSimEnv(forward_from=CUT, num_train=None, train_from=RECENT)
    train = recent.tasks("train")
    assert [t.task_id for t in train] == [t.task_id for t in fwd.tasks("train") if t.info["date"] >= RECENT]
    assert RECENT <= min(_dates(train)) and max(_dates(train)) < CUT
    for split in ("eval", "forward"):
        assert [t.task_id for t in recent.tasks(split)] == [t.task_id for t in fwd.tasks(split)], split
    days = _raw_days()
    eval_dates = set(_dates(fwd.tasks("eval")))
    want = {k for k, p in days.items() if RECENT <= k[0] < CUT and k[0] not in eval_dates and _optimum(p) > 500.0}
    assert {(t.info["date"], t.info["point"]) for t in train} == want
    # with the default size, the cut of the first 2,000 of the draw
    small = GridSimEnv(forward_from=CUT, train_from=RECENT).tasks("train")
    assert [t.task_id for t in small] == [t.task_id for t in GridSimEnv(forward_from=CUT).tasks("train")
                                          if t.info["date"] >= RECENT]  # fmt: skip
    assert 0 < len(small) < 2000


@pytest.mark.parametrize("kwargs, msg", [
    ({"forward_from": CUT, "train_from": CUT}, "is not before forward_from"),
    ({"train_from": "2023-02-30"}, "train_from = '2023-02-30' is not a date"),
    ({"train_from": "2030-01-01"}, "train_from = 2030-01-01 leaves no training day"),
])  # fmt: skip
def test_bad_train_from_is_refused(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        GridSimEnv(**kwargs).tasks("train")


def test_train_from_reaches_the_rows_the_clis_and_rl(tmp_path, capsys):
    from tests.envs.test_env_server_cli import _parse
    from tests.launcher.test_launcher_preflight import nemo_cfg

    from prime_rl.cli.gridsim import main
    from prime_rl.envs.nemo_gym.rows import read_rows, write_server
    from prime_rl.launcher import envserver

    root = write_server("gridsim", tmp_path / "w", {"forward_from": CUT, "train_from": RECENT, "num_train": 300})
    rows = {s: read_rows(root / "data" / f"{s}.jsonl") for s in ("train", "eval", "forward")}
    want = [t.task_id for t in GridSimEnv(forward_from=CUT, num_train=300).tasks("train") if t.info["date"] >= RECENT]
    assert [r["task_id"] for r in rows["train"]] == want and len(rows["eval"]) == len(rows["forward"]) == 200
    got = _parse(["write", "gridsim", str(tmp_path), "--forward-from", CUT, "--train-from", RECENT])
    assert got.env_args() == {"forward_from": CUT, "train_from": RECENT}
    for argv, msg in ((["write", "reverse-text", str(tmp_path), "--train-from", RECENT], "--train-from applies to"),
                      (["write", "gridsim", str(tmp_path), "--forward-from", RECENT, "--train-from", CUT],
                       "is not before --forward-from")):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            _parse(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err
    # `gridsim sft-data --split train` and `baseline --split train` play the cut split
    main(["sft-data", "--split", "train", "--forward-from", CUT, "--train-from", RECENT, "--num-train", "300",
          str(tmp_path / "demos.jsonl")])  # fmt: skip
    demos = [json.loads(x) for x in (tmp_path / "demos.jsonl").read_text().splitlines()]
    assert [d["task_id"] for d in demos] == want
    # `rl` writes missing rows with the [env_server] options
    cfg = nemo_cfg(tmp_path / "rl", "--env-server.forward-from", CUT, "--env-server.train-from", RECENT)
    (plan,) = envserver.plan_env_servers(cfg, probe=lambda url: False)
    envserver.write_rows(cfg, plan, tmp_path / "write.log", timeout_s=300)
    assert f"--forward-from {CUT} --train-from {RECENT}" in (tmp_path / "write.log").read_text()
    data = plan.write_root / "resources_servers" / "gridsim_v1" / "data"
    assert min(json.loads(x)["info"]["date"] for x in (data / "train.jsonl").read_text().splitlines()) >= RECENT


def test_rl_refuses_env_server_dates_out_of_order_and_rows_written_with_other_dates(tmp_path):
    """`[env_server]` train_from on or after forward_from is a config error naming both fields; existing rows whose
    server.json records other dates than `[env_server]` are refused before anything starts (rl would reuse them and
    train on other days)."""
    from tests.launcher.test_launcher_preflight import nemo_cfg

    from prime_rl.config.loader import ConfigError
    from prime_rl.envs.nemo_gym.rows import write_server
    from prime_rl.launcher import envserver
    from prime_rl.launcher.errors import PreflightError

    with pytest.raises(ConfigError, match="env_server.train_from = 2024-01-01 is not before env_server.forward_from"):
        nemo_cfg(tmp_path, "--env-server.forward-from", CUT, "--env-server.train-from", CUT)
    cfg = nemo_cfg(tmp_path, "--env-server.forward-from", CUT, "--env-server.train-from", RECENT)
    (plan,) = envserver.plan_env_servers(cfg, probe=lambda url: False)
    root = plan.write_root
    write_server("gridsim", root, {"forward_from": CUT, "num_train": 20})  # rows of every training year
    with pytest.raises(PreflightError, match=r"written with train_from = None .* env_server.train_from = '2023-01-01'"):
        envserver.plan_env_servers(cfg, probe=lambda url: False)
    write_server("gridsim", root, {"forward_from": CUT, "train_from": RECENT, "num_train": 20})
    (plan,) = envserver.plan_env_servers(cfg, probe=lambda url: False)
    assert plan.write_root is None  # the matching rows are reused


@pytest.mark.parametrize("value, msg", [
    ("20240101", "'20240101' is not a date in the form YYYY-MM-DD (e.g. 2024-01-01 for January 1, 2024)"),
    ("2024-1-1", "'2024-1-1' is not a date in the form YYYY-MM-DD"),
    ("2024-02-30", "'2024-02-30' is not a date (day is out of range for month): write it YYYY-MM-DD"),
])  # fmt: skip
def test_a_malformed_date_names_the_option_and_the_form(tmp_path, capsys, value, msg):
    """`gridsim`, `env-server write` and rl's `[env_server]` read their dates as YYYY-MM-DD only: pydantic alone
    reads `20240101` as a Unix timestamp ("Datetimes provided to dates should have zero time"), Python's
    fromisoformat as the basic ISO form. The config error names the option and where it was set; the environment's
    own argument refuses the same forms."""
    from tests.envs.test_env_server_cli import _parse
    from tests.launcher.test_launcher_preflight import nemo_cfg

    from prime_rl.cli.gridsim import main
    from prime_rl.config.loader import ConfigError

    for field in ("forward-from", "train-from"):
        with pytest.raises(SystemExit) as e:
            main(["show", "--split", "train", f"--{field}", value])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"  {field.replace('-', '_')}: {msg}" in err and f"(from --{field})" in err
        with pytest.raises(SystemExit) as e:
            _parse(["write", "gridsim", str(tmp_path), f"--{field}", value])
        assert e.value.code == 2 and f"{field.replace('-', '_')}: {msg}" in capsys.readouterr().err
        with pytest.raises(ConfigError, match=rf"env_server.{field.replace('-', '_')}: {__import__('re').escape(msg)}"):
            nemo_cfg(tmp_path, f"--env-server.{field}", value)
        with pytest.raises(ValueError, match=rf"gridsim: {field.replace('-', '_')} = '{value}' is not a date YYYY-MM-DD"):
            GridSimEnv(**{field.replace("-", "_"): value})
    path = tmp_path / "rl.toml"
    path.write_text(f'[env_server]\nforward_from = "{value}"\n')
    with pytest.raises(ConfigError, match=rf"env_server.forward_from: .* \(in {path}\)"):
        nemo_cfg(tmp_path, "@", str(path))


def test_train_from_without_forward_from_cuts_the_train_split_only(tmp_path, capsys):
    """Without a forward split, `train_from` still cuts the train split (eval drawn from every day, unchanged), so
    the CLIs accept it alone; with a split other than train (which it does not change) `gridsim` refuses it."""
    from tests.envs.test_env_server_cli import _parse

    from prime_rl.cli.gridsim import main

    whole, recent = GridSimEnv(num_train=300), GridSimEnv(num_train=300, train_from=RECENT)
    want = [t.task_id for t in whole.tasks("train") if t.info["date"] >= RECENT]
    assert [t.task_id for t in recent.tasks("train")] == want and 0 < len(want) < 300
    assert max(_dates(whole.tasks("eval"))) > RECENT > min(_dates(whole.tasks("eval")))
    assert [t.task_id for t in recent.tasks("eval")] == [t.task_id for t in whole.tasks("eval")]
    assert _parse(["write", "gridsim", str(tmp_path), "--train-from", RECENT]).env_args() == {"train_from": RECENT}
    for argv, split in ((["show", "--train-from", RECENT], "eval (the default)"),
                        (["baseline", "--split", "forward", "--forward-from", CUT, "--train-from", RECENT], "forward")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert (f"--train-from cuts the train split only, and --split {split} is the same without it: drop "
                "--train-from, or use --split train") in capsys.readouterr().err


def test_baseline_line_names_the_train_cut(tmp_path, capsys):
    from prime_rl.cli.gridsim import main

    out = tmp_path / "scores.jsonl"
    main(["baseline", "--policy", "idle", "--split", "train", "--num-train", "300", "--forward-from", CUT,
          "--train-from", RECENT, "--out", str(out)])  # fmt: skip
    line = capsys.readouterr().out.splitlines()[0]
    n = len([t for t in GridSimEnv(forward_from=CUT, num_train=300).tasks("train") if t.info["date"] >= RECENT])
    assert line.startswith(f"policy idle split train forward_from {CUT} train_from {RECENT} data ercot-2021-2024 "
                           f"(packaged) tasks {n} mean ")  # fmt: skip


def test_rl_says_which_dates_it_writes_rows_with(tmp_path, monkeypatch, caplog):
    """rl's "rows missing" line gives the whole `env-server write` command, date options included."""
    import logging
    from types import SimpleNamespace

    from tests.launcher.test_launcher_preflight import nemo_cfg

    from prime_rl.launcher import envserver, preflight
    from prime_rl.launcher import rl as rl_launcher

    cfg = nemo_cfg(tmp_path, "--env-server.forward-from", CUT, "--env-server.train-from", RECENT)
    (plan,) = envserver.plan_env_servers(cfg, probe=lambda url: False)
    written = []
    monkeypatch.setattr(envserver, "write_rows", lambda c, p, log, timeout_s: written.append(p))
    monkeypatch.setattr(preflight, "check_prompt_lengths", lambda c: None)
    monkeypatch.setattr(rl_launcher, "write_configs", lambda p: {})
    run_plan = SimpleNamespace(run_dir=tmp_path / "run", resume=False, clean=False, env_servers=[plan], config=cfg)
    with caplog.at_level(logging.INFO, logger="prime_rl.rl"):
        rl_launcher.execute_head(run_plan, cfg)
    assert written == [plan]
    assert (f"rows missing: writing them with `env-server write gridsim {plan.write_root} --forward-from {CUT} "
            f"--train-from {RECENT}`") in caplog.text
