"""Layered `@` files: a later file's list of tables replaces an earlier file's whole, and the parser says so once
per list (`config.layers.replaced_lists`); tables merge key by key without a word."""

from __future__ import annotations

from prime_rl.config.layers import replaced_lists
from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig

SOURCE = '[[orchestrator.train.source]]\nname = "{name}"\nenv.id = "reverse-text"\n'


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_a_later_files_list_replaces_the_earlier_one_and_is_named(tmp_path, capsys):
    a = _write(tmp_path / "A.toml", SOURCE.format(name="a1") + SOURCE.format(name="a2") + "[orchestrator]\nbatch_size = 8\n")
    b = _write(tmp_path / "B.toml", SOURCE.format(name="b1") + "[orchestrator]\nseed = 3\n")
    cfg = parse_config(RLConfig, ["@", a, "@", b])
    assert [s.name for s in cfg.orchestrator.train.source] == ["b1"]  # replaced whole
    assert (cfg.orchestrator.batch_size, cfg.orchestrator.seed) == (8, 3)  # tables merge
    line = (f"orchestrator.train.source from {b} replaces the 2 entries of {a} (lists replace, tables merge: repeat "
            f"in {b} the entries of {a} to keep, or give the list in one file only)")  # fmt: skip
    assert capsys.readouterr().err.splitlines() == [f"prime-rl: warning: {line}"]
    assert replaced_lists(["@", a, "@", b]) == [line]


def test_only_a_list_set_by_two_files_is_named(tmp_path):
    a = _write(tmp_path / "A.toml", SOURCE.format(name="a1"))
    b = _write(tmp_path / "B.toml", "[orchestrator]\nseed = 3\n[orchestrator.gate]\nadvantage_range = [0.1, 0.9]\n")
    c = _write(tmp_path / "C.toml", '[[orchestrator.eval.source]]\nname = "e"\nenv.id = "reverse-text"\n')
    assert replaced_lists(["@", a, "@", b, "@", c]) == []  # each list set once; a list of numbers is a value
    assert replaced_lists(["@", a, "@", c, "@", a]) == [
        f"orchestrator.train.source from {a} replaces the 1 entry of {a} (lists replace, tables merge: repeat in {a} "
        f"the entries of {a} to keep, or give the list in one file only)"
    ]
    # a JSON flag or a section's own `--x @ file` is not a root layer
    assert replaced_lists(["@", a, "--orchestrator.train.source", "[]"]) == []
    assert replaced_lists(["@", a, "--orchestrator", "@", c]) == []
