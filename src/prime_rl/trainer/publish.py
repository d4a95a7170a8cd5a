"""Publishing policy versions: `weights/step_N/` (HF safetensors + config.json, or a PEFT adapter), then `STABLE`.

Layout of a full version: `model.safetensors` (HF key names, LoRA merged in), `config.json`, and the base model's
tokenizer/generation files, so the folder loads on its own with `AutoModelForCausalLM.from_pretrained` or vLLM.
An adapter version: `adapter_model.safetensors` + `adapter_config.json` (peft's layout). The directory is filled
under a temporary name and renamed, then `STABLE` is written (docs/design.md invariant 4). Only the newest
`weights.keep_last` versions are kept. A version holding a NaN or infinite weight is never published
(`NonFiniteWeights`, docs/design.md invariant 7).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from prime_rl.config.trainer import WeightsConfig
from prime_rl.monitor.rundir import step_dirs
from prime_rl.trainer.dist import DistInfo, barrier
from prime_rl.trainer.model import hf_config, is_lora
from prime_rl.transport.atomic import STABLE, atomic_write_dir

# files copied from the base model folder so a published version is a complete model folder
AUX_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
PEFT_PREFIX = "base_model.model."


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Gather the unsharded state dict on rank 0 (CPU tensors; other ranks get {}). Collective: call on all ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def merge_lora_state_dict(sd: dict[str, torch.Tensor], scaling: float, adapter: str = "default") -> dict[str, torch.Tensor]:
    """Fold LoRA adapters into their base weights and return HF key names.

    For each adapted linear `M`: `M.weight = M.base_layer.weight + scaling * lora_B @ lora_A` (Hu et al. 2021,
    eq. 3; scaling = alpha / r), `M.base_layer.bias -> M.bias`; the `base_model.model.` prefix is removed.
    """
    out: dict[str, torch.Tensor] = {}
    a_suffix, b_suffix = f".lora_A.{adapter}.weight", f".lora_B.{adapter}.weight"
    for key, val in sd.items():
        name = key[len(PEFT_PREFIX) :] if key.startswith(PEFT_PREFIX) else key
        if ".lora_" in name:
            continue
        if ".base_layer." in name:
            mod, _, leaf = name.rpartition(".base_layer.")
            if leaf == "weight":
                lora_a = sd[PEFT_PREFIX + mod + a_suffix] if PEFT_PREFIX + mod + a_suffix in sd else sd[mod + a_suffix]
                lora_b = sd[PEFT_PREFIX + mod + b_suffix] if PEFT_PREFIX + mod + b_suffix in sd else sd[mod + b_suffix]
                val = (val.float() + scaling * (lora_b.float() @ lora_a.float())).to(val.dtype)
            name = f"{mod}.{leaf}"
        out[name] = val
    return out


def check_output_head(sd: dict[str, torch.Tensor], config) -> None:
    """A published full model must load as the trained one, in transformers and vLLM alike.

    Tied (`tie_word_embeddings = true`): the file holds the input embedding only (vLLM and transformers both
    rebuild the head from it), so the trained head must BE the embedding; untied: `lm_head.weight` must be in the
    file. Raises RuntimeError otherwise (never publishes a model whose head would silently change on load).
    """
    head, embed = sd.get("lm_head.weight"), sd.get("model.embed_tokens.weight")
    if getattr(config, "tie_word_embeddings", False):
        if head is not None and embed is not None and not torch.equal(head, embed):
            raise RuntimeError(
                "tie_word_embeddings = true but the trained lm_head.weight differs from model.embed_tokens.weight: "
                "a tied file would load with the embedding as the head; untie the model before training"
            )
    elif head is None and embed is not None:
        raise RuntimeError("tie_word_embeddings = false but the state dict has no lm_head.weight to publish")


class NonFiniteWeights(RuntimeError):
    """A policy version to publish holds NaN or infinite weights (names the step and the tensors)."""


def check_finite_weights(sd: dict[str, torch.Tensor], step: int) -> None:
    """Refuse to publish `sd` (the tensors as they would be written) when a floating-point tensor holds a NaN or an
    infinity: one vectorised `isfinite` per tensor.

    Raises:
        NonFiniteWeights: names the step, how many tensors are affected and the first few.
    """
    bad = [k for k, v in sd.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise NonFiniteWeights(
            f"policy version {step}: {len(bad)} weight tensor(s) hold NaN or inf ({', '.join(bad[:3])}"
            f"{', ...' if len(bad) > 3 else ''}); not published. Training diverged: lower optim.lr or optim.max_norm "
            "and resume from an earlier checkpoint (--ckpt.resume-step N)"
        )


def lora_scaling(model: nn.Module) -> float:
    pc = model.peft_config["default"]
    return pc.lora_alpha / (pc.r**0.5 if getattr(pc, "use_rslora", False) else pc.r)


def publish_weights(
    model: nn.Module,
    weights_dir: Path,
    step: int,
    cfg: WeightsConfig,
    base_model_path: Path,
    dist_info: DistInfo,
    dtype: torch.dtype = torch.float32,
    chat_template: Path | None = None,
) -> Path | None:
    """Write policy version `step` to `weights_dir/step_<step>/` (rank 0), then `STABLE`; prune old versions.

    Collective (all ranks gather the state dict). Returns the folder on rank 0, None elsewhere. Raises
    NonFiniteWeights (rank 0) when a weight to write is NaN or infinite: nothing is published.
    `dtype`: dtype of the floating-point tensors written (fp32 on CPU, the compute dtype on GPU).
    `chat_template`: a template file (`model.chat_template`) written as the folder's `chat_template.jinja`, so the
    published model renders as it was trained without the setting.
    """
    sd = full_state_dict(model)
    out = None
    if dist_info.is_main:
        fmt = cfg.format
        if fmt == "auto":
            fmt = "full"
        if fmt == "adapter" and not is_lora(model):
            raise ValueError("weights.format = 'adapter' needs model.lora; use 'full' or 'auto'")
        target = Path(weights_dir) / f"step_{step}"

        def fill(tmp: Path) -> None:
            if fmt == "adapter":
                from peft import get_peft_model_state_dict

                asd = _prep(get_peft_model_state_dict(model, state_dict=sd), dtype)
                check_finite_weights(asd, step)
                save_file(asd, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
                model.peft_config["default"].save_pretrained(str(tmp))
            else:
                msd = merge_lora_state_dict(sd, lora_scaling(model)) if is_lora(model) else dict(sd)
                config = hf_config(model)
                check_output_head(msd, config)
                if getattr(config, "tie_word_embeddings", False):
                    msd.pop("lm_head.weight", None)
                msd = _prep(msd, dtype)
                check_finite_weights(msd, step)
                save_file(msd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
                config.save_pretrained(str(tmp))
                for name in AUX_FILES:
                    src = Path(base_model_path) / name
                    if src.is_file() and not (tmp / name).exists():
                        shutil.copy2(src, tmp / name)
                if chat_template is not None:
                    write_chat_template(tmp, Path(chat_template))

        out = atomic_write_dir(target, fill, marker=STABLE)
        prune_step_dirs(Path(weights_dir), cfg.keep_last)
    barrier()
    return out


def write_chat_template(folder: Path, template: Path) -> None:
    """Make `template` the chat template of the model folder: `chat_template.jinja`, and no `chat_template` key left
    in `tokenizer_config.json` or a `chat_template.json` that could take precedence."""
    import json

    shutil.copyfile(template, folder / "chat_template.jinja")
    (folder / "chat_template.json").unlink(missing_ok=True)
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        data = json.loads(tc.read_text())
        if "chat_template" in data:
            del data["chat_template"]
            tc.write_text(json.dumps(data, indent=2, ensure_ascii=False))


def _prep(sd: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in sd.items()}


def prune_step_dirs(parent: Path, keep_last: int | None, subdir: str | None = None,
                    keep_interval: int | None = None) -> None:
    """Delete all but the newest `keep_last` complete `step_N` folders of `parent` (complete = STABLE inside,
    or inside `subdir` when given, in which case only that subdir is removed and its parent if left empty); those
    whose N is a multiple of `keep_interval` stay too."""
    if keep_last is None:
        return
    found = [(n, p) for n, p in step_dirs(parent) if ((p / subdir) if subdir else p).joinpath(STABLE).is_file()]
    for step_no, step_dir in found[:-keep_last]:
        if keep_interval is not None and step_no % keep_interval == 0:
            continue
        victim = step_dir / subdir if subdir else step_dir
        shutil.rmtree(victim, ignore_errors=True)
        if subdir and step_dir.is_dir() and not any(step_dir.iterdir()):
            step_dir.rmdir()
