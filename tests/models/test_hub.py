"""`model.name` as a hub id: resolved once with huggingface_hub from its cache (HF_HUB_OFFLINE=1, no network here),
used by SFT end to end; an id that cannot be found fails at once with one error line naming the field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prime_rl.models.hub import ModelNotFoundError, is_hub_id, resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache_with(model_dir: Path, cache: Path, repo: str) -> Path:
    """Lay `model_dir` out as huggingface_hub's cache holds a downloaded repository (refs/main -> snapshot)."""
    entry = cache / f"models--{repo.replace('/', '--')}"
    snap = entry / "snapshots" / COMMIT
    shutil.copytree(model_dir, snap)
    (entry / "refs").mkdir(parents=True)
    (entry / "refs" / "main").write_text(COMMIT)
    return snap


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from prime_rl.models.tiny import cached_tiny_model

    cache = tmp_path / "hub"
    snap = hub_cache_with(cached_tiny_model(hidden=32, layers=2), cache, "acme/tiny-qwen3")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    resolve_model.cache_clear()
    yield cache, snap
    resolve_model.cache_clear()


def test_local_folders_and_hub_ids(offline_cache, tmp_path):
    cache, snap = offline_cache
    assert resolve_model("acme/tiny-qwen3") == snap
    assert is_hub_id("acme/tiny-qwen3") and not is_hub_id(str(tmp_path)) and not is_hub_id("/abs/path")
    assert resolve_model(str(snap)) == snap.resolve()
    with pytest.raises(ModelNotFoundError, match=r"model.name = 'acme/missing': no such local folder, and no model "
                                                 r"of that id in the local Hugging Face cache \(HF_HUB_OFFLINE=1\)"):
        resolve_model("acme/missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json in it"):
        resolve_model(str(tmp_path / "empty"))


def test_sft_trains_a_hub_id_and_names_a_missing_one(offline_cache, tmp_path):
    cache, snap = offline_cache
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "prime_rl.cli.sft", "--data.path", str(data), "--max-steps", "1",
            "--data.batch-size", "1", "--seq-len", "64", "--threads", "1"]  # fmt: skip
    run = tmp_path / "run"
    r = subprocess.run([*args, "--model.name", "acme/tiny-qwen3", "--output-dir", str(run)], env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = run / "weights" / "step_1"
    assert (out / "STABLE").is_file() and (out / "tokenizer.json").is_file()  # the snapshot's tokenizer came along
    t0 = time.monotonic()
    r = subprocess.run([*args, "--model.name", "acme/missing", "--output-dir", str(tmp_path / "r2")], env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and time.monotonic() - t0 < 60
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("sft: error: model.name = 'acme/missing'"), r.stderr
    assert "Traceback" not in r.stderr


def test_chat_template_reaches_vllm_and_published_folders(tmp_path):
    """`model.chat_template`: vLLM gets `--chat-template <abs path>`; a published folder gets the file as its
    `chat_template.jinja` and loses any `chat_template` key that would take precedence."""
    from transformers import AutoTokenizer

    from prime_rl.config.inference import InferenceConfig
    from prime_rl.inference.server import build_vllm_args
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.trainer.publish import write_chat_template

    tpl = tmp_path / "t.jinja"
    tpl.write_text("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    args = build_vllm_args(InferenceConfig(model={"name": "m", "chat_template": str(tpl)}), cpu=True)
    assert args[args.index("--chat-template") + 1] == str(tpl.resolve())
    assert "--chat-template" not in build_vllm_args(InferenceConfig(model={"name": "m"}), cpu=True)
    folder = tmp_path / "pub"
    shutil.copytree(cached_tiny_model(hidden=32, layers=2), folder)
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tc, "chat_template": "{{ 'old' }}"}))
    write_chat_template(folder, tpl)
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "[user]x"
