"""`benchmarks/rollout_transport.py`: the batches it builds are real batches of about the asked size, and a tiny run
(`--sizes 1024 --reps 1`, real sender and receiver processes for both transports) prints the table and writes JSON
of the documented shape. Structure only: no timings are checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.transport.batch import decode_batch, encode_batch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "rollout_transport.py"


def _bench():
    sys.path.insert(0, str(REPO))
    from benchmarks import rollout_transport

    return rollout_transport


@pytest.mark.parametrize("size", [4096, 1 << 20])
def test_batches_are_decodable_and_about_the_asked_size(size):
    batches = _bench().make_batches(size, world=2, seq_len=4096)
    assert [b.rank for b in batches] == [0, 1]
    for b in batches:
        data = encode_batch(b)
        assert 0.9 * size <= len(data) <= 1.1 * size
        back = decode_batch(data)
        assert max(len(mb) for mb in back.micro_batches) <= 4096
        tokens = sum(len(mb) for mb in back.micro_batches)
        assert tokens == (size - 400) // 21
        assert back.total_loss_tokens == 2 * sum(mb.num_loss_tokens for mb in b.micro_batches)


def test_tiny_run_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "1024", "--reps", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert set(r) == {"host", "reps", "seq_len", "dir", "wall_s", "rows"}
    assert set(r["host"]) == {"cpu_model", "cpus", "matmul_gflops_2_threads"}
    assert r["host"]["matmul_gflops_2_threads"] > 0
    assert r["reps"] == 1
    assert [(row["ranks"], row["target_bytes"]) for row in r["rows"]] == [(1, 1024), (2, 1024)]
    expected_bytes = len(encode_batch(_bench().make_batches(1024, world=1, seq_len=4096)[0]))
    for row in r["rows"]:
        assert row["batch_bytes"] == expected_bytes
        assert set(row["median_ms"]) == set(row["ms"]) == {"filesystem", "tcp"}
        assert all(len(v) == 1 and v[0] > 0 for v in row["ms"].values())
        med = row["median_ms"]
        assert row["tcp_over_filesystem"] == pytest.approx(med["tcp"] / med["filesystem"])
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("host: ")
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["ranks"])
    assert lines[header].split() == ["ranks", "batch/rank", "filesystem", "ms", "tcp", "ms", "tcp/fs"]
    table = [line.split() for line in lines[header + 1 :]]
    assert [(cells[0], cells[1] + " " + cells[2]) for cells in table] == [("1", "0.9 KiB"), ("2", "0.9 KiB")]
    for cells, row in zip(table, r["rows"], strict=True):
        assert float(cells[5]) == pytest.approx(row["tcp_over_filesystem"], abs=0.006)


def test_non_positive_reps_exit_2():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--reps", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--reps" in proc.stderr
