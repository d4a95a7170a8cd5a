"""RL/eval task rows through Hugging Face `datasets`: NeMo Gym rows from parquet give the same tasks as from JSONL;
prompt rows from a saved dataset (train/test splits, column mapping) become tasks whose other columns reach the
server's verify; the config takes one source."""

from __future__ import annotations

import json

import pytest

from prime_rl.config.orchestrator import NemoGymTasksetConfig
from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.nemo_gym.rows import task_to_row
from prime_rl.orchestrator.sources.nemo_gym import NemoGymSource, as_nemo_row

datasets = pytest.importorskip("datasets")


def test_parquet_rows_give_the_jsonl_tasks(tmp_path):
    env = GridSimEnv(num_train=20, num_eval=5)
    rows = [task_to_row(t) for t in env.tasks("train")]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    a = NemoGymSource("j", NemoGymTasksetConfig(dataset=tmp_path / "train.jsonl")).tasks("train")
    b = NemoGymSource("p", NemoGymTasksetConfig(dataset=tmp_path / "train.parquet")).tasks("train")
    assert len(a) == 20
    assert [(t.task_id, t.messages, t.tools, t.info) for t in a] == [(t.task_id, t.messages, t.tools, t.info) for t in b]
    src = NemoGymSource("p", NemoGymTasksetConfig(dataset=tmp_path / "train.parquet"))
    src.tasks("train")
    assert src._rows[("train", a[0].task_id)]["responses_create_params"]["input"] == a[0].messages


def test_prompt_rows_from_a_saved_dataset_with_splits_and_mapping(tmp_path):
    qa = [{"question": f"{i}+{i}?", "answer": str(2 * i), "uid": f"q{i}"} for i in range(8)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(qa[:6]),
                          "test": datasets.Dataset.from_list(qa[6:])}).save_to_disk(str(tmp_path / "qa"))  # fmt: skip
    cfg = NemoGymTasksetConfig(name=str(tmp_path / "qa"), eval_split="test", columns={"prompt": "question", "task_id": "uid"})
    src = NemoGymSource("qa", cfg)
    train, ev = src.tasks("train"), src.tasks("eval")
    assert [t.task_id for t in train] == [f"q{i}" for i in range(6)] and [t.task_id for t in ev] == ["q6", "q7"]
    assert train[1].messages == [{"role": "user", "content": "1+1?"}] and ev[0].split == "eval"
    row = src._rows[("eval", "q7")]  # what /seed_session and /verify get: the answer rides along
    assert row["answer"] == "14" and row["responses_create_params"] == {"input": "7+7?", "tools": []}
    no_eval = NemoGymSource("qa", NemoGymTasksetConfig(name=str(tmp_path / "qa"), columns={"prompt": "question"}))
    with pytest.raises(ValueError, match="eval_split"):
        no_eval.tasks("eval")


def test_as_nemo_row_and_config_sources(tmp_path):
    full = {"responses_create_params": {"input": "x"}, "task_id": "a"}
    assert as_nemo_row(full) is full
    with pytest.raises(ValueError, match="responses_create_params` or `prompt`.*env.taskset.columns"):
        as_nemo_row({"question": "x"})
    with pytest.raises(ValueError, match="exactly one of `dataset`"):
        NemoGymTasksetConfig(dataset=tmp_path / "a.jsonl", name="x/y")
    with pytest.raises(ValueError, match="exactly one of `dataset`"):
        NemoGymTasksetConfig()
    with pytest.raises(ValueError, match="eval_split` goes with `name`"):
        NemoGymTasksetConfig(dataset=tmp_path / "a.jsonl", eval_split="test")
