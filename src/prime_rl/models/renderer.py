"""The chat renderer (the `renderers` package) shared by sampling (orchestrator) and training (SFT).

One renderer serves both, so every next-turn prompt extends the tokens actually sampled and SFT trains on the
same token layout that RL samples (../shared/notes/vllm-cpu.md, "Tool calls and rendering").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_renderer(tokenizer: Any, cfg: Any = "qwen3", enable_thinking: bool | None = None) -> Any:
    """A `renderers` renderer for `tokenizer`.

    Args:
        cfg: a renderer name (e.g. `qwen3`) or a config with `.name` and `.enable_thinking` (RendererConfig).
        enable_thinking: overrides the config's value; applied where the renderer supports it.

    Raises:
        ValueError: unknown renderer name (`renderer.name`).
    """
    from renderers import create_renderer
    from renderers.configs import config_from_name

    name = cfg if isinstance(cfg, str) else cfg.name
    if enable_thinking is None:
        enable_thinking = False if isinstance(cfg, str) else bool(cfg.enable_thinking)
    try:
        base = config_from_name(name)
    except Exception as e:
        raise ValueError(f"renderer.name = {name!r} is not a known `renderers` renderer ({e}); try 'qwen3'") from e
    if base is not None and "enable_thinking" in type(base).model_fields:
        base = type(base)(enable_thinking=enable_thinking)
    return create_renderer(tokenizer, base)


def load_tokenizer(model_name: str | Path) -> Any:
    """`transformers.AutoTokenizer` of the model directory (or hub id)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_name))
