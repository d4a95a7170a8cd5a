"""SFT dataset mixing (`[[data.source]]`) and the held-out validation split: proportions over many draws within
binomial bounds, determinism, resume, and per-epoch coverage within a source."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prime_rl.config.trainer import SFTConfig
from prime_rl.trainer.sft_data import SFTDataError
from prime_rl.trainer.sft_mix import Mixture, held_out_split


def test_proportions_within_binomial_bounds():
    weights = [1.0, 2.0, 5.0]
    mix = Mixture([5, 7, 3], weights, seed=3)
    n = 40_000
    counts = np.bincount(mix.sources(n), minlength=3)
    for c, w in zip(counts, weights, strict=True):
        p = w / 8.0
        sd = math.sqrt(n * p * (1 - p))
        assert abs(c - n * p) < 4 * sd, (counts, p)
    # each step's batch is drawn per sample, so single steps vary around the mean
    per_step = [sum(s == 2 for s, _ in mix.step(k, 8)) for k in range(1, 200)]
    assert len(set(per_step)) > 3


def test_hand_worked_draws():
    mix = Mixture([4, 4], [1.0, 3.0], seed=0)  # p = (0.25, 0.75): source 0 exactly when u < 0.25
    u = np.random.default_rng(0).random(6)
    assert mix.sources(6).tolist() == [int(x >= 0.25) for x in u]


def test_deterministic_and_resumable():
    a = Mixture([5, 9], [1.0, 1.0], seed=1)
    b = Mixture([5, 9], [1.0, 1.0], seed=1)
    seq = [a.step(k, 4) for k in range(1, 9)]
    assert b.step(8, 4) == seq[-1]  # a resumed run (no earlier steps drawn) draws the same samples
    assert [b.step(k, 4) for k in range(1, 9)] == seq
    assert [Mixture([5, 9], [1.0, 1.0], seed=2).step(k, 4) for k in range(1, 9)] != seq


def test_each_source_visits_every_row_once_per_epoch():
    mix = Mixture([3, 5], [1.0, 1.0], seed=4)
    picks = [p for k in range(1, 51) for p in mix.step(k, 4)]
    for s, n in ((0, 3), (1, 5)):
        rows = [i for src, i in picks if src == s]
        for e in range(len(rows) // n):
            assert sorted(rows[e * n : (e + 1) * n]) == list(range(n))


def test_held_out_split():
    train, val = held_out_split(10, 0.25, seed=0)
    assert len(val) == 2 and len(train) == 8 and sorted(train + val) == list(range(10))  # round(2.5) = 2
    assert held_out_split(10, 0.25, seed=0) == (train, val)
    with pytest.raises(SFTDataError, match="val.fraction"):
        held_out_split(1, 0.5, seed=0)


def test_config_checks(tmp_path):
    src = [{"path": "a.jsonl", "weight": 1}, {"path": "b.jsonl", "weight": 3}]
    cfg = SFTConfig(data={"source": src})
    assert cfg.data.path is None and [s.resolved_label() for s in cfg.data.source] == ["a", "b"]
    with pytest.raises(ValueError, match="data.source lists the datasets and data.path is set too"):
        SFTConfig(data={"source": src, "path": "c.jsonl"})
    with pytest.raises(ValueError, match="data.name is set too.*--data.name None"):
        SFTConfig(data={"source": src, "name": "org/ds"})
    with pytest.raises(ValueError, match="labels must differ"):
        SFTConfig(data={"source": [{"path": "x/a.jsonl"}, {"path": "y/a.jsonl"}]})
    with pytest.raises(ValueError, match="exactly one of path"):
        SFTConfig(data={"source": [{"weight": 1}]})
    with pytest.raises(ValueError, match="sets neither val.data nor val.fraction: set exactly one"):
        SFTConfig(val={"interval": 5})
    with pytest.raises(ValueError, match="weight"):
        SFTConfig(data={"source": [{"path": "a.jsonl", "weight": 0}]})


def test_sources_layered_over_a_data_path_name_the_fix_and_it_works(tmp_path):
    """[[data.source]] in a file layered over one that sets data.path: the error names both files and the two ways
    to unset data.path; either way the layering then reads the sources alone."""
    from prime_rl.config.loader import ConfigError, parse_config

    base, mix, unset = tmp_path / "base.toml", tmp_path / "mix.toml", tmp_path / "mix-unset.toml"
    base.write_text('[data]\npath = "one.jsonl"\nbatch_size = 4\n')
    sources = '[[data.source]]\npath = "a.jsonl"\n\n[[data.source]]\npath = "b.jsonl"\n'
    mix.write_text(sources)
    unset.write_text('[data]\npath = "None"\n\n' + sources)
    with pytest.raises(ConfigError) as refused:
        parse_config(SFTConfig, ["@", str(base), "@", str(mix)])
    msg = str(refused.value)
    assert "unset it with --data.path None on the command line, or path = \"None\" under [data]" in msg
    assert f"data.source in {mix}" in msg and f"data.path in {base}" in msg
    for args in (["@", str(base), "@", str(mix), "--data.path", "None"], ["@", str(base), "@", str(unset)]):
        cfg = parse_config(SFTConfig, args)
        assert cfg.data.path is None and [str(s.path) for s in cfg.data.source] == ["a.jsonl", "b.jsonl"]
        assert cfg.data.batch_size == 4  # the rest of the base's [data] stays


def test_sft_cli_fraction_leaving_no_training_rows_exits_2(tiny_model_dir, tmp_path):
    """A held-out fraction that leaves no training rows is a user error: one line naming val.fraction, exit 2."""
    import json
    import subprocess
    import sys

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}) + "\n")
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.sft", "--model.name", str(tiny_model_dir),
                        "--data.path", str(data), "--val.fraction", "0.5", "--max-steps", "1",
                        "--output-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "val.fraction = 0.5 of 1 rows leaves no training rows" in r.stderr and "Traceback" not in r.stderr
