"""`step_dirs` and `newest_step_dir`: which `step_N` folders count, checked against a brute-force listing."""

from pathlib import Path

from prime_rl.monitor.rundir import newest_step_dir, step_dirs


def _tree(root: Path) -> None:
    for n in (1, 2, 3, 10, 11):
        (root / f"step_{n}").mkdir(parents=True)
    for n in (1, 2, 10):  # 3 and 11 are still being written (no marker)
        (root / f"step_{n}" / "STABLE").write_text("")
    (root / "step_x").mkdir()  # not a step folder
    (root / "step_12").write_text("a file, not a folder")
    (root / "notes").mkdir()


def _brute(root: Path, marker: str | None, above: int = -1) -> list[tuple[int, Path]]:
    out = []
    for p in root.glob("step_*"):
        name = p.name[len("step_"):]
        if p.is_dir() and name.isdigit() and int(name) > above and (marker is None or (p / marker).exists()):
            out.append((int(name), p))
    return sorted(out)


def test_step_dirs_match_a_brute_force_listing(tmp_path):
    _tree(tmp_path)
    assert step_dirs(tmp_path) == _brute(tmp_path, None)
    assert [n for n, _ in step_dirs(tmp_path)] == [1, 2, 3, 10, 11]  # numeric order, not 1, 10, 11, 2, 3
    assert step_dirs(tmp_path, marker="STABLE") == _brute(tmp_path, "STABLE")
    assert step_dirs(tmp_path / "missing") == []
    assert step_dirs(tmp_path / "step_12") == []  # a file where a folder is expected


def test_newest_step_dir_skips_unmarked_and_older_versions(tmp_path):
    _tree(tmp_path)
    for above in (-1, 0, 1, 2, 9, 10, 11, 20):
        expected = _brute(tmp_path, "STABLE", above)
        assert newest_step_dir(tmp_path, "STABLE", above) == (expected[-1] if expected else None), above
    assert newest_step_dir(tmp_path / "missing", "STABLE") is None
