"""`prime-rl sft-data ENV OUT`: an environment's demonstrations as SFT JSONL (`sft data.path`)."""

from __future__ import annotations

import json
import subprocess
import sys

from prime_rl.envs.sft_data import write_sft_data


def test_reverse_text_demonstrations_are_exact_reversals(tmp_path):
    out = tmp_path / "d" / "sft.jsonl"
    assert write_sft_data("reverse-text", out, limit=5) == 5
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 5 and all(r["split"] == "train" for r in rows)
    for r in rows:
        user, answer = r["messages"][1]["content"], r["messages"][2]["content"]
        assert r["messages"][2]["role"] == "assistant" and answer == user[::-1]


def test_cli_names_an_unknown_environment(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "sft-data", "reverse-text",
                         str(tmp_path / "e.jsonl"), "--split", "eval", "--limit", "2"], capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0 and "2 eval demonstrations" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "prime_rl.cli.prime_rl", "sft-data", "nope", str(tmp_path / "x.jsonl")],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "'nope': unknown environment" in bad.stderr and "Traceback" not in bad.stderr
