"""`model.name`: a local Hugging Face model folder, or a hub id (`org/name`) resolved once with `huggingface_hub`.

`resolve_model(name)` returns a local folder holding `config.json`: the folder itself, or the hub snapshot
(`snapshot_download`, only the config, tokenizer, chat-template and safetensors files), downloaded once into the
Hugging Face cache. With `HF_HUB_OFFLINE=1` only the local cache is searched (no network). Anything else fails at
once with one `ModelNotFoundError` naming `model.name`, what was searched, and the fix, before any model loads.
Results are memoised per process.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

# files a causal LM needs to load in transformers and vLLM (no duplicate .bin / .gguf / .onnx weights)
HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt", "*.tiktoken"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelNotFoundError(ValueError):
    """`model.name` is neither a local model folder nor a model the hub (or its local cache) has."""


def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` as huggingface_hub reads it (1/ON/YES/TRUE), read now rather than at import."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def is_hub_id(name: str) -> bool:
    """True for `org/name` that is not an existing local path (the form of a hub repository id)."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


@functools.lru_cache(maxsize=32)
def resolve_model(name: str) -> Path:
    """The local folder of `model.name` (see the module docstring).

    Raises:
        ModelNotFoundError: a local path that is not a folder with `config.json`, or a hub id not found (offline:
            not in the local cache; online: not reachable or no such repository).
    """
    p = Path(name).expanduser()
    if p.exists() or not is_hub_id(name):
        if (p / "config.json").is_file():
            return p.resolve()
        what = "no such folder" if not p.exists() else "no config.json in it"
        raise ModelNotFoundError(
            f"model.name = {name!r}: {what}. Give a local Hugging Face model folder (e.g. `prime-rl smollm "
            f"outputs/smollm` or `prime-rl tiny-model outputs/tiny-model`) or a hub id such as "
            f"'HuggingFaceTB/SmolLM2-135M-Instruct'"
        )
    from huggingface_hub import snapshot_download

    offline = hub_offline()
    try:
        folder = Path(snapshot_download(name, allow_patterns=HUB_PATTERNS, local_files_only=offline))
    except Exception as e:  # noqa: BLE001 - every failure becomes one message naming the field
        where = "the local Hugging Face cache (HF_HUB_OFFLINE=1)" if offline else "the hub or the local cache"
        reason = " ".join(str(e).split())[:160] or type(e).__name__
        raise ModelNotFoundError(
            f"model.name = {name!r}: no such local folder, and no model of that id in {where} "
            f"({type(e).__name__}: {reason}). Give a local Hugging Face model folder, or a hub id that is downloaded "
            f"(`hf download {name}` where the hub is reachable)"
        ) from None
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"model.name = {name!r}: the hub snapshot {folder} has no config.json")
    return folder
