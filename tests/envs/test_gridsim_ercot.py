"""GridSim on ERCOT's real NP4-180-ER files (skipped when they are absent; run in CI)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from prime_rl.envs.gridsim.baselines import run_baseline
from prime_rl.envs.gridsim.battery import optimal_schedule
from prime_rl.envs.gridsim.data import PACKAGED, load_compact, load_ercot, load_packaged
from prime_rl.envs.gridsim.env import GridSimEnv

pytestmark = pytest.mark.ercot

# US clock changes 2021-2024 (second Sunday of March: 23 hours; first Sunday of November: 25 hours)
CLOCK_CHANGES = {
    "2021-03-14": 23, "2021-11-07": 25, "2022-03-13": 23, "2022-11-06": 25,
    "2023-03-12": 23, "2023-11-05": 25, "2024-03-10": 23, "2024-11-03": 25,
}  # fmt: skip


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ercot-cache")


def test_parse_cache_and_clock_change_days(ercot_data_dir, cache_dir):
    t0 = time.perf_counter()
    table = load_ercot(ercot_data_dir, cache_dir=cache_dir)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = load_ercot(ercot_data_dir, cache_dir=cache_dir)
    second = time.perf_counter() - t0
    assert second < 1.0 and second < first, (first, second)
    assert (again.prices == table.prices).all() and (again.dates == table.dates).all()
    assert list(cache_dir.glob("*.npz"))
    dropped = {(s.split()[0], int(s.split()[2])) for s in table.dropped}
    assert dropped == set(CLOCK_CHANGES.items())
    assert len(table.dropped) == 8 * 5
    assert not set(CLOCK_CHANGES) & set(table.dates.tolist())
    assert len(table) == 1461 * 5 - 40  # 2021-2024 has 1461 days
    # a known price: HB_NORTH 2021-01-01 HE01 as ERCOT published it
    i = np.nonzero((table.dates == "2021-01-01") & (table.points == "HB_BUSAVG"))[0][0]
    assert table.prices[i, 0] == pytest.approx(18.24)


def test_negative_price_days_are_kept_and_charge_is_paid(ercot_data_dir, cache_dir):
    table = load_ercot(ercot_data_dir, cache_dir=cache_dir)
    neg = np.nonzero(table.prices.min(axis=1) < 0)[0]
    assert len(neg) > 100  # mostly HB_WEST
    i = int(neg[np.argmin(table.prices[neg].min(axis=1))])
    prices = table.prices[i]
    sched, profit = optimal_schedule(prices)
    h = int(np.argmin(prices))
    assert prices[h] < 0 and sched[h] == 1  # being paid to charge: the optimum always charges in the cheapest hour


@pytest.fixture(scope="module")
def real_env(ercot_dir_shared, cache_dir):
    return GridSimEnv(data_dir=ercot_dir_shared, cache_dir=cache_dir)


def test_real_splits(real_env):
    train, ev = real_env.tasks("train"), real_env.tasks("eval")
    assert (len(train), len(ev)) == (2000, 200)
    assert not {t.info["date"] for t in ev} & {t.info["date"] for t in train}
    assert all(t.info["point"] in {"HB_HOUSTON", "HB_NORTH", "HB_SOUTH", "HB_WEST", "HB_BUSAVG"} for t in ev)
    assert all(optimal_schedule(t.info["prices"])[1] > 500 for t in ev)


@pytest.mark.parametrize("policy,lo,hi", [("greedy", 0.72, 0.86), ("optimal", 1.0, 1.0), ("idle", 0.2, 0.2)])
def test_real_baselines(real_env, policy, lo, hi):
    scores = np.array([r["score"] for r in run_baseline(real_env, policy, "eval")])
    assert len(scores) == 200
    assert lo - 1e-12 <= scores.mean() <= hi + 1e-12, scores.mean()


def test_cli_baseline_on_real_files(ercot_data_dir, tmp_path, capsys):
    from prime_rl.cli.gridsim import main

    main(["baseline", "--policy", "greedy", "--split", "eval", "--data-dir", str(ercot_data_dir),
          "--out", str(tmp_path / "g.jsonl")])  # fmt: skip
    out = capsys.readouterr().out
    mean = float(out.split(" mean ")[1].split()[0])
    assert 0.72 <= mean <= 0.86


def test_packaged_file_equals_the_xlsx_files(ercot_data_dir, cache_dir, tmp_path, capsys):
    """The shipped compact file holds exactly what the four workbooks give (days, order, prices to the cent,
    dropped days), and `gridsim pack-ercot` rebuilds it from them."""
    from prime_rl.cli.gridsim import main

    xlsx = load_ercot(ercot_data_dir, cache_dir=cache_dir)
    if sorted(p.name for p in ercot_data_dir.glob("DAMLZHBSPP_*.xlsx")) != [f"DAMLZHBSPP_{y}.xlsx" for y in range(2021, 2025)]:
        pytest.skip("the comparison needs exactly the 2021-2024 files")
    packed = load_packaged()
    for k in ("dates", "points", "prices", "dropped"):
        assert np.array_equal(getattr(packed, k), getattr(xlsx, k)), k
    main(["pack-ercot", "--data-dir", str(ercot_data_dir), str(tmp_path / "again.npz")])
    assert "7265 (date, hub) days (40 dropped)" in capsys.readouterr().out
    again = load_compact(tmp_path / "again.npz")
    for k in ("dates", "points", "prices", "dropped"):
        assert np.array_equal(getattr(again, k), getattr(packed, k)), k
    assert PACKAGED.stat().st_size < 1_000_000


def test_default_env_matches_the_xlsx_env(real_env):
    """Same 200 eval days, same train draw and same baseline scores from the packaged file as from the xlsx."""
    default = GridSimEnv()
    for split in ("eval", "train"):
        a, b = default.tasks(split), real_env.tasks(split)
        assert [t.task_id for t in a] == [t.task_id for t in b]
        assert [t.info["prices"] for t in a] == [t.info["prices"] for t in b]
        assert [t.messages for t in a[:50]] == [t.messages for t in b[:50]]
    for policy in ("greedy", "random"):
        assert run_baseline(default, policy, "eval") == run_baseline(real_env, policy, "eval")


def test_forward_split_from_the_xlsx_files_equals_the_packaged_one(ercot_dir_shared, cache_dir):
    """`forward_from` on ERCOT's own workbooks gives the packaged file's forward split, day for day and price for
    price, and its forward days all come after its training days."""
    xlsx = GridSimEnv(data_dir=ercot_dir_shared, cache_dir=cache_dir, forward_from="2024-01-01")
    packaged = GridSimEnv(forward_from="2024-01-01")
    for split in ("train", "eval", "forward"):
        a, b = packaged.tasks(split), xlsx.tasks(split)
        assert [(t.task_id, t.info["prices"]) for t in a] == [(t.task_id, t.info["prices"]) for t in b], split
    assert max(t.info["date"] for t in xlsx.tasks("train")) < min(t.info["date"] for t in xlsx.tasks("forward"))
