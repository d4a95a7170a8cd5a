"""Randomly initialised Qwen3-architecture models for tests, CI and demos (no model hub needed).

`build_tiny_model(out)` writes a Hugging Face model directory (config.json, model.safetensors in float32,
generation_config.json, the byte-level Qwen3-format tokenizer of `prime_rl.models.tokenizer`) that loads in
`transformers.AutoModelForCausalLM` / `AutoTokenizer` and in vLLM. Input and output embeddings are untied unless
`tie_embeddings = True` (tests of the tied round trip: trainer publishing, vLLM reload).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from prime_rl.models.tokenizer import EOS_TOKEN_ID, PAD_TOKEN_ID, VOCAB_SIZE, write_tokenizer

HEAD_DIM = 32


def tiny_qwen3_config(hidden: int = 128, layers: int = 2, max_position_embeddings: int = 4096, **overrides):
    """A `transformers.Qwen3Config` for a tiny model.

    Heads of dimension 32 (a head size vLLM's CPU attention supports): `hidden // 32` query heads, half as many
    key/value heads (grouped-query attention, at least 1); MLP width `3 * hidden`; vocabulary = tokenizer length
    (265). Raises ValueError if `hidden` is not a positive multiple of 32 or `layers < 1`.
    """
    from transformers import Qwen3Config

    if hidden <= 0 or hidden % HEAD_DIM:
        raise ValueError(f"hidden={hidden}: must be a positive multiple of {HEAD_DIM} (the head size)")
    if layers < 1:
        raise ValueError(f"layers={layers}: must be >= 1")
    heads = hidden // HEAD_DIM
    kv_heads = max(1, heads // 2)
    if heads % kv_heads:
        kv_heads = heads
    kwargs = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=EOS_TOKEN_ID,
        pad_token_id=PAD_TOKEN_ID,
        attention_bias=False,
        use_cache=True,
    )
    kwargs.update(overrides)
    cfg = Qwen3Config(**kwargs)
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.dtype = "float32"
    return cfg


def build_tiny_model(
    out_dir: str | Path,
    hidden: int = 128,
    layers: int = 2,
    seed: int = 0,
    max_position_embeddings: int = 4096,
    init_std: float = 0.02,
    tie_embeddings: bool = False,
) -> Path:
    """Write a randomly initialised Qwen3ForCausalLM + byte-level tokenizer to `out_dir`; return the path.

    `tie_embeddings = True` writes a model whose output projection is its input embedding
    (`tie_word_embeddings = true`, no `lm_head.weight` in the file), as many pretrained checkpoints are.

    Weights: normal(0, `init_std`) for linear and embedding matrices, ones for RMSNorm, drawn from
    `torch.Generator().manual_seed(seed)` in parameter-name order (the same seed gives the same bytes). Stored as
    float32 safetensors. Files: config.json, generation_config.json (eos = `<|im_end|>`, `<|endoftext|>`),
    model.safetensors, tokenizer.json, tokenizer_config.json, chat_template.jinja.
    """
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = tiny_qwen3_config(hidden, layers, max_position_embeddings, tie_word_embeddings=tie_embeddings)
    with torch.device("cpu"):
        model = Qwen3ForCausalLM(cfg).to(torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * init_std)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=[EOS_TOKEN_ID, PAD_TOKEN_ID], pad_token_id=PAD_TOKEN_ID).save_pretrained(out)
    write_tokenizer(out, model_max_length=max_position_embeddings)
    return out


def cached_tiny_model(
    hidden: int = 128, layers: int = 2, seed: int = 0, cache_dir: str | Path | None = None, tie_embeddings: bool = False
) -> Path:
    """`build_tiny_model` once per parameter set, cached under `cache_dir` (default: $PRIME_RL_CACHE or
    `<tmp>/prime-rl-cache`) in `tiny-h{hidden}-l{layers}-s{seed}[-tied]-<hash of the factory sources>`.

    Safe across concurrent processes (build in a temporary directory, then an atomic rename). Treat the result as
    read-only; copy it before changing weights. Meant for pytest fixtures::

        @pytest.fixture(scope="session")
        def tiny_model_dir():
            return cached_tiny_model()
    """
    root = Path(cache_dir or os.environ.get("PRIME_RL_CACHE") or Path(tempfile.gettempdir()) / "prime-rl-cache")
    root.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for source in ("tiny.py", "tokenizer.py", "qwen3_chat_template.jinja"):
        digest.update((here / source).read_bytes())
    tied = "-tied" if tie_embeddings else ""
    final = root / f"tiny-h{hidden}-l{layers}-s{seed}{tied}-{digest.hexdigest()[:10]}"
    if (final / "model.safetensors").exists():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=root))
    try:
        build_tiny_model(tmp, hidden=hidden, layers=layers, seed=seed, tie_embeddings=tie_embeddings)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def describe(model_dir: str | Path) -> dict:
    """Small summary of a model directory's config (for logs and CLI output)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    keys = (
        "architectures",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
        "tie_word_embeddings",
    )
    return {k: cfg.get(k) for k in keys}
