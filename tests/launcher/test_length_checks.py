"""Issue 13 E: lengths checked against each other before anything starts: `seq_len` against the inference context
(`inference.vllm.max_model_len`, else the model's own `max_position_embeddings`) and the trainer's `seq_len`, and
the first prompts of a sample of tasks against `seq_len`. `rl --dry-run` refuses `max_model_len 512 < seq_len 2048`.
Each test failed on the code before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.rl import RLConfig
from prime_rl.launcher import preflight
from prime_rl.launcher.errors import PreflightError

BIN = Path(sys.executable).parent


def test_dry_run_refuses_seq_len_above_max_model_len(tmp_path):
    r = subprocess.run([str(BIN / "rl"), "--seq-len", "2048", "--inference.vllm.max-model-len", "512", "--dry-run",
                        "--output-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "seq_len = 2048 (orchestrator.seq_len) is above inference.vllm.max_model_len = 512" in r.stderr
    assert not (tmp_path / "run" / "configs").exists()


def test_trainer_seq_len_below_orchestrator_seq_len_is_refused():
    with pytest.raises(ConfigError, match="orchestrator.seq_len = 4096 is above trainer.seq_len = 2048"):
        parse_config(RLConfig, ["--orchestrator.seq-len", "4096", "--trainer.seq-len", "2048"])
    parse_config(RLConfig, ["--seq-len", "4096", "--inference.vllm.max-model-len", "4096"])


def test_seq_len_above_the_models_own_context_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 1024}))
    cfg = parse_config(RLConfig, ["--model.name", str(model), "--seq-len", "2048"])
    with pytest.raises(PreflightError, match=r"seq_len = 2048 \(orchestrator.seq_len\) is above the model's context "
                                             r"length \(max_position_embeddings in .*\) = 1024"):  # fmt: skip
        preflight.check_context(cfg)
    preflight.check_context(parse_config(RLConfig, ["--model.name", str(model), "--seq-len", "1024"]))


def test_prompts_longer_than_seq_len_are_refused_before_start(tmp_path):
    from prime_rl.models.tiny import cached_tiny_model

    src = '[{"name": "grid", "env": {"id": "gridsim"}}]'  # GridSim's first prompts: ~1,260-1,300 tokens
    args = ["--model.name", str(cached_tiny_model()), "--orchestrator.train.source", src,
            "--orchestrator.renderer.name", "qwen3"]
    with pytest.raises(PreflightError, match=r"source 'grid' \(train split\): all 16 sampled first prompts have at "
                                             r"least seq_len = 1024 tokens"):  # fmt: skip
        preflight.check_prompt_lengths(parse_config(RLConfig, [*args, "--seq-len", "1024"]))
    preflight.check_prompt_lengths(parse_config(RLConfig, [*args, "--seq-len", "2048"]))
