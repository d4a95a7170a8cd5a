"""The chat renderer (the `renderers` package): messages + tools -> token ids, completion ids -> tool calls.

One renderer serves sampling and training, so every next-turn prompt extends the tokens actually sampled
(../shared/notes/vllm-cpu.md, "Tool calls and rendering").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prime_rl.config.orchestrator import RendererConfig


def make_renderer(tokenizer: Any, cfg: RendererConfig) -> Any:
    """A `renderers` renderer for `tokenizer` by `cfg.name` (e.g. `qwen3`), with `enable_thinking` where supported.

    Raises:
        ValueError: unknown renderer name (`renderer.name`).
    """
    from renderers import create_renderer
    from renderers.configs import config_from_name

    try:
        base = config_from_name(cfg.name)
    except Exception as e:
        raise ValueError(f"renderer.name = {cfg.name!r} is not a known `renderers` renderer ({e}); try 'qwen3'") from e
    if base is not None and "enable_thinking" in type(base).model_fields:
        base = type(base)(enable_thinking=cfg.enable_thinking)
    return create_renderer(tokenizer, base)


def load_tokenizer(model_name: str | Path) -> Any:
    """`transformers.AutoTokenizer` of the model directory (or hub id)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_name))
