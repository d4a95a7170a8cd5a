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
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("acme/missing")
    assert str(e.value) == (
        "model.name = 'acme/missing': no such local folder; no model of that id in the local Hugging Face cache "
        "(HF_HUB_OFFLINE=1). Give a local Hugging Face model folder (none at ./acme/missing: `prime-rl tiny-model "
        "acme/missing` or `prime-rl smollm acme/missing` writes one there), or a hub id that is downloaded "
        "(`hf download acme/missing` where the hub is reachable)")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json in it"):
        resolve_model(str(tmp_path / "empty"))


FIX = ". Give a local Hugging Face model folder (none at ./Org/Model: `prime-rl tiny-model Org/Model` or `prime-rl " \
      "smollm Org/Model` writes one there), or a hub id that is downloaded (`hf download Org/Model` where the hub " \
      "is reachable)"
HUB_LONG = ("Got: ConnectError: [Errno -2] Name or service not known\nAn error happened while trying to locate the files "
            "on the Hub, and we cannot find the appropriate snapshot folder for the specified revision on the local "
            "disk. Please check your internet connection and try again.")  # huggingface_hub 2.4's text, 230 chars


def _errors():
    import httpx
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    def answer(code: int) -> httpx.Response:
        return httpx.Response(code, request=httpx.Request("GET", "https://huggingface.co/api/models/Org/Model"))

    unreachable = LocalEntryNotFoundError(HUB_LONG)
    unreachable.__cause__ = OSError("[Errno -2] Name or service not known")
    long_words = " ".join(["word"] * 60) + ". Second sentence."  # 40 whole words fit in 200 characters
    return [
        (unreachable, "the hub is not reachable (OSError: [Errno -2] Name or service not known) and the local "
                      "Hugging Face cache has no model of that id"),
        (LocalEntryNotFoundError(HUB_LONG), "the hub is not reachable and the local Hugging Face cache has no model "
                                            "of that id"),
        (RepositoryNotFoundError("404 Client Error. Repository Not Found for url: https://huggingface.co/api/x",
                                 response=answer(404)),
         "the hub has no model of that id (or it is private: `hf auth login` with an account that can read it)"),
        (GatedRepoError("403 gated", response=answer(403)), "the hub's repository of that id is gated (accept its terms on "
                                                     "its hub page, then `hf auth login`)"),
        (RuntimeError(long_words), "the hub lookup failed (RuntimeError: " + " ".join(["word"] * 40) + "...)"),
    ]


@pytest.mark.parametrize("i", range(5))
def test_a_hub_id_that_does_not_resolve_is_named_in_whole_words(monkeypatch, i):
    """The whole message, for each way huggingface_hub fails (its own text ran to 230 characters and was cut
    mid-word at 160 before)."""
    import huggingface_hub

    error, reason = _errors()[i]

    def fail(*a, **k):
        raise error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    resolve_model.cache_clear()
    try:
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model("Org/Model")
    finally:
        resolve_model.cache_clear()
    assert str(e.value) == f"model.name = 'Org/Model': no such local folder; {reason}{FIX}"
    assert e.value.named("trainer.model.name") == f"trainer.model.name = 'Org/Model': no such local folder; {reason}{FIX}"


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


def test_a_relative_model_folder_that_is_missing_says_how_to_make_it(offline_cache):
    """`outputs/tiny-model` (the configs' default) has the form of a hub id; when neither the folder nor the hub has
    it, the message names the local path looked at and the command that writes a model there."""
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("outputs/tiny-model")
    assert "none at ./outputs/tiny-model: `prime-rl tiny-model outputs/tiny-model`" in str(e.value)


def test_missing_step_folder_lists_the_steps_beside_it(tmp_path):
    weights = tmp_path / "weights"
    for step in (100, 20, 1000):
        (weights / f"step_{step}").mkdir(parents=True)
    (weights / "notes").mkdir()
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(str(weights / "step_2000"))
    assert str(e.value).startswith(
        f"model.name = '{weights}/step_2000': no such folder ({weights} holds step_20, step_100, step_1000). Give a "
        "local Hugging Face model folder")
    with pytest.raises(ModelNotFoundError) as e:  # no step folders beside it: the message as before
        resolve_model(str(tmp_path / "step_5"))
    assert f"'{tmp_path}/step_5': no such folder. Give a local" in str(e.value)


def test_a_one_slash_step_path_read_as_a_hub_id_still_lists_the_steps_beside_it(offline_cache, tmp_path, monkeypatch):
    """`weights/step_1000` has a hub id's form; when it is missing and `weights/` holds other steps, the hub-id
    message names them too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights" / "step_100").mkdir(parents=True)
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("weights/step_1000")
    assert "none at ./weights/step_1000 (weights holds step_100):" in str(e.value)
