"""SFT data through Hugging Face `datasets`: local parquet, a JSONL folder, a saved DatasetDict, column mapping,
prompt-completion rows, and the hub's offline errors. The same rows must give the same training."""

from __future__ import annotations

import json
import socket
import time

import pytest

from prime_rl.config.trainer import SFTConfig
from prime_rl.hf_data import DataLoadError, load_rows, strip_nulls
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import sft
from prime_rl.trainer.sft_data import SFTDataError, load_chat_rows, to_chat_row

datasets = pytest.importorskip("datasets")

TOOLS = [{"type": "function", "function": {"name": "look", "description": "look around",
                                          "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}}}}]
ROWS = [
    {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": f"where {i}?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "id": f"c{i}", "function": {"name": "look", "arguments": json.dumps({"dir": "n"})}}]},
        {"role": "tool", "content": "a wall", "tool_call_id": f"c{i}"},
        {"role": "assistant", "content": f"done {i}"},
    ], "tools": TOOLS}
    for i in range(6)
] + [{"messages": [{"role": "user", "content": f"reverse {w}"}, {"role": "assistant", "content": w[::-1]}]}
     for w in ("abc", "hello", "tide")]  # fmt: skip


def _parquet(rows, path):
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def test_parquet_rows_equal_the_original_rows(tmp_path):
    """Arrow fills absent struct fields with null (a user message gets tool_calls None, ...); those are removed,
    so every row reads back exactly as written."""
    p = _parquet(ROWS, tmp_path / "chat.parquet")
    raw = datasets.load_dataset("parquet", data_files=str(p), split="train")[0]["messages"][1]
    assert raw.get("tool_calls", "absent") is None  # what Arrow does, and what strip_nulls undoes
    assert load_rows(path=p) == ROWS
    assert load_chat_rows(path=p) == [{k: v for k, v in r.items()} for r in ROWS]


def test_jsonl_direct_and_through_datasets_agree(tmp_path):
    folder = tmp_path / "jsonl-ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    direct = load_chat_rows(path=folder / "train.jsonl")
    via_datasets = load_chat_rows(name=str(folder), split="train")  # a local folder of data files
    assert direct == ROWS and via_datasets == ROWS


def test_saved_dataset_dict_split_subset_and_column_mapping(tmp_path):
    renamed = [{"conversations": r["messages"], **({"tools": r["tools"]} if "tools" in r else {})} for r in ROWS]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(renamed[:6]),
                               "test": datasets.Dataset.from_list(renamed[6:])})  # fmt: skip
    dd.save_to_disk(str(tmp_path / "saved"))
    test = load_chat_rows(path=tmp_path / "saved", split="test", columns={"messages": "conversations"})
    assert test == ROWS[6:]
    with pytest.raises(SFTDataError, match="needs a 'messages' column.*data.columns"):
        load_chat_rows(path=tmp_path / "saved", split="test")
    with pytest.raises(SFTDataError, match="column 'dialog'.*not in the data"):
        load_chat_rows(path=tmp_path / "saved", split="test", columns={"messages": "dialog"})
    with pytest.raises(SFTDataError, match="Unknown split|split"):
        load_chat_rows(path=tmp_path / "saved", split="validation")


def test_prompt_completion_rows_become_messages():
    assert to_chat_row({"prompt": "2+2?", "completion": "4"}, "r") == {
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    conv = {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
            "completion": [{"role": "assistant", "content": "a"}], "tools": json.dumps(TOOLS)}  # fmt: skip
    assert to_chat_row(conv, "r") == {"messages": conv["prompt"] + conv["completion"], "tools": TOOLS}
    with pytest.raises(SFTDataError, match="no assistant message"):
        to_chat_row({"messages": [{"role": "user", "content": "x"}]}, "r")
    assert strip_nulls({"a": None, "b": [{"c": None, "d": 1}], "e": 0}) == {"b": [{"d": 1}], "e": 0}


def test_unreachable_hub_fails_fast_with_the_fix(monkeypatch):
    with socket.socket() as s:  # a port nothing listens on: the "hub" refuses at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    t0 = time.monotonic()
    with pytest.raises(SFTDataError, match=r"data.name = 'trl-lib/Capybara': not a local path.*not reachable.*HF_HUB_OFFLINE"):
        load_chat_rows(name="trl-lib/Capybara")
    assert time.monotonic() - t0 < 10


def test_offline_mode_without_a_cached_copy_names_the_dataset(tmp_path):
    import subprocess
    import sys

    code = ("from prime_rl.trainer.sft_data import load_chat_rows\n"
            "load_chat_rows(name='someone/not-cached-anywhere')\n")  # fmt: skip
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    import os

    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    assert "SFTDataError: data.name = 'someone/not-cached-anywhere'" in r.stderr and "local file" in r.stderr


def test_config_takes_path_or_name_not_both():
    assert SFTConfig(data={"name": "x/y"}).data.path is None
    with pytest.raises(ValueError, match="data.path and data.name both set"):
        SFTConfig(data={"name": "x/y", "path": "a.jsonl"})
    with pytest.raises(ValueError, match=r"set data.path .* or data.name"):
        SFTConfig(data={"path": "None"})


def test_sft_on_parquet_trains_exactly_as_on_jsonl(tiny_model_dir, tmp_path):
    """Same rows as JSONL and as parquet: the same losses step for step (same rendering, same order)."""
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    parquet = _parquet(ROWS, tmp_path / "d.parquet")
    losses = {}
    for name, path in (("jsonl", jsonl), ("parquet", parquet)):
        cfg = SFTConfig(model={"name": str(tiny_model_dir)}, data={"path": str(path), "batch_size": 3},
                        output_dir=str(tmp_path / name), optim={"lr": 3e-3}, max_steps=3, seq_len=256, threads=1)  # fmt: skip
        sft.run(cfg)
        losses[name] = [r["loss"] for r in read_metrics(tmp_path / name, "sft")]
    assert len(losses["jsonl"]) == 3 and losses["jsonl"] == losses["parquet"]


def test_load_rows_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(DataLoadError, match="exactly one"):
        load_rows(path=tmp_path, name="x")
    with pytest.raises(DataLoadError, match="does not exist"):
        load_rows(path=tmp_path / "nope.parquet")
    (tmp_path / "rows.txt").write_text("x")
    with pytest.raises(DataLoadError, match="unknown file type '.txt'"):
        load_rows(path=tmp_path / "rows.txt")
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n[1]\n')
    with pytest.raises(DataLoadError, match="line 2 is not a JSON object"):
        load_rows(path=tmp_path / "bad.jsonl")
