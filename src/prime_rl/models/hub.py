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
    """`model.name` is neither a local model folder nor a model the hub (or its local cache) has.

    `name`: the value; `detail`: what was searched and the fix. `str(e)` is `model.name = NAME: DETAIL`;
    `e.named(field, where)` names another field (and where it was set)."""

    def __init__(self, name: str, detail: str):
        self.name, self.detail = name, detail
        super().__init__(self.named("model.name"))

    def named(self, field: str, where: str = "") -> str:
        """The message with `field` (e.g. `trainer.model.name`) in front, and `where` (` (from --model.name)`,
        ` (in FILE)`) after the value."""
        return f"{field} = {self.name!r}{where}: {self.detail}"


def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` as huggingface_hub reads it (1/ON/YES/TRUE), read now rather than at import."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def is_hub_id(name: str) -> bool:
    """True for `org/name` that is not an existing local path (the form of a hub repository id)."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def _other_steps(path: Path, most: int = 5) -> str:
    """` (PARENT holds step_100, step_200)`: the `step_*` folders beside a missing `.../step_N` (the latest `most`,
    by step), or "" when the parent does not exist or holds none."""
    parent = path.parent
    if not re.fullmatch(r"step_\d+", path.name) or not parent.is_dir():
        return ""
    steps = sorted((d for d in parent.iterdir() if d.is_dir() and re.fullmatch(r"step_\d+", d.name)),
                   key=lambda d: int(d.name[5:]))  # fmt: skip
    if not steps:
        return ""
    names = ", ".join(d.name for d in steps[-most:])
    return f" ({parent} holds {'..., ' if len(steps) > most else ''}{names})"


@functools.lru_cache(maxsize=32)
def resolve_model(name: str) -> Path:
    """The local folder of `model.name` (see the module docstring).

    Raises:
        ModelNotFoundError: a local path that is not a folder with `config.json`, or a hub id not found (offline:
            not in the local cache; online: not reachable or no such repository).
    """
    local = Path(name).expanduser()
    if local.exists() or not is_hub_id(name):
        if (local / "config.json").is_file():
            return local.resolve()
        what = f"no such folder{_other_steps(local)}" if not local.exists() else "no config.json in it"
        raise ModelNotFoundError(
            name, f"{what}. Give a local Hugging Face model folder (e.g. `prime-rl smollm outputs/smollm` or "
            f"`prime-rl tiny-model outputs/tiny-model`) or a hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'"
        )
    from huggingface_hub import snapshot_download

    offline = hub_offline()
    try:
        folder = Path(snapshot_download(name, allow_patterns=HUB_PATTERNS, local_files_only=offline))
    except Exception as e:  # noqa: BLE001 - every failure becomes one message naming the field
        raise ModelNotFoundError(
            name, f"no such local folder; {hub_reason(e, offline)}. Give a local Hugging Face model folder (none "
            f"at ./{name}{_other_steps(local)}: `prime-rl tiny-model {name}` or `prime-rl smollm {name}` writes one there), or a hub id "
            f"that is downloaded (`hf download {name}` where the hub is reachable)"
        ) from None
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(name, f"the hub snapshot {folder} has no config.json")
    return folder


def hub_reason(error: Exception, offline: bool) -> str:
    """Why `snapshot_download` found no model, in whole words: offline and not cached; the hub unreachable (its
    network error) and not cached; no such (or a private or gated) repository; else the error's first sentence."""
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    if isinstance(error, LocalEntryNotFoundError):
        if offline:
            return "no model of that id in the local Hugging Face cache (HF_HUB_OFFLINE=1)"
        cause = error.__cause__ or error.__context__
        why = f" ({type(cause).__name__}: {_clip(str(cause))})" if cause is not None else ""
        return f"the hub is not reachable{why} and the local Hugging Face cache has no model of that id"
    if isinstance(error, GatedRepoError):
        return "the hub's repository of that id is gated (accept its terms on its hub page, then `hf auth login`)"
    if isinstance(error, RepositoryNotFoundError):
        return "the hub has no model of that id (or it is private: `hf auth login` with an account that can read it)"
    return f"the hub lookup failed ({type(error).__name__}: {_clip(str(error))})"


def _clip(text: str, limit: int = 200) -> str:
    """`text` on one line, its first sentence, cut at a word boundary (with `...`) when longer than `limit`."""
    text = " ".join(text.split())
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if len(first) <= limit:
        return first.rstrip(".")
    return first[:limit].rsplit(" ", 1)[0] + "..."
