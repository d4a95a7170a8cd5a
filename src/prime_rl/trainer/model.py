"""Loading the trained model: transformers causal LM from a local path, optional LoRA (peft), FSDP2.

Parameters are kept in fp32 (the optimizer's master copy). With a bf16 compute dtype (`dtype = bfloat16`, or
`auto` on GPU, or `auto` on a CPU where bf16 pays: `prime_rl.cpu_bf16`) FSDP2's
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` computes in bf16 and reduces gradients in fp32, on GPU
and CPU alike; otherwise everything is fp32.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from prime_rl.config.trainer import TrainerModelConfig
from prime_rl.trainer.dist import DistInfo


class ModelLoadError(ValueError):
    """The model path or its settings are unusable (names `model.name` / the field)."""


def model_dir(name: str | Path) -> Path:
    """`model.name` as a local Hugging Face model folder, checked before anything loads from it: the folder itself,
    or the snapshot of a hub id (`prime_rl.models.hub.resolve_model`: downloaded once, HF_HUB_OFFLINE honoured).

    Raises:
        ModelLoadError: neither (names `model.name`, what was searched and what to point it at).
    """
    from prime_rl.models.hub import ModelNotFoundError, resolve_model

    try:
        return resolve_model(str(name))
    except ModelNotFoundError as e:
        raise ModelLoadError(str(e)) from None


def compute_dtype(cfg: TrainerModelConfig, device: torch.device, world_size: int = 1) -> torch.dtype:
    """The named dtype, or for `auto`: bf16 on CUDA; on CPU bf16 where `prime_rl.cpu_bf16.auto_cpu_dtype(model)`
    says it pays for this model on this host, for a lone process (ranks of one trainer could measure differently, so several CPU ranks stay fp32;
    `rl` passes an explicit dtype), else fp32."""
    if cfg.dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        if world_size > 1:
            return torch.float32
        from prime_rl.cpu_bf16 import auto_cpu_dtype

        return torch.bfloat16 if auto_cpu_dtype(cfg.name) == "bfloat16" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.dtype]


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks (first ModuleList whose items are `*DecoderLayer`/`*Block`), for per-layer FSDP."""
    for module in model.modules():
        blocks = ("DecoderLayer", "Block", "Layer")
        if isinstance(module, nn.ModuleList) and len(module) and type(module[0]).__name__.endswith(blocks):
            return list(module)
    raise ModelLoadError(f"cannot find the decoder layers of {type(model).__name__} for FSDP sharding")


def use_fsdp(cfg: TrainerModelConfig, dist_info: DistInfo) -> bool:
    """Whether the model is wrapped with FSDP2: `model.fsdp` when a bool; `auto` -> with more than one rank, or when
    the compute dtype is not float32 (FSDP2's mixed precision keeps fp32 master weights)."""
    if cfg.fsdp != "auto":
        return bool(cfg.fsdp)
    return dist_info.world_size > 1 or compute_dtype(cfg, dist_info.device, dist_info.world_size) != torch.float32


def load_model(cfg: TrainerModelConfig, dist_info: DistInfo) -> nn.Module:
    """Load `cfg.name` (fp32 params), add LoRA adapters if `cfg.lora`, apply activation checkpointing and FSDP2
    (`use_fsdp`).

    Returns the module to train (a peft `PeftModel` when LoRA is on). Only adapter weights require grad with LoRA.

    Raises:
        ModelLoadError: the path does not hold a transformers causal LM, or FSDP is off with world size > 1.
    """
    from transformers import AutoModelForCausalLM

    from prime_rl.trainer.packed_attention import register

    path = model_dir(cfg.name)
    device = dist_info.device
    attn = register()  # sdpa, with packed samples attended to separately (no T x T mask)
    model = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation=attn, trust_remote_code=cfg.trust_remote_code
    )
    if cfg.lora is not None:
        from peft import LoraConfig, get_peft_model

        lcfg = LoraConfig(
            r=cfg.lora.rank,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=list(cfg.lora.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lcfg)
    if cfg.activation_checkpointing:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.to(device)
    fsdp = use_fsdp(cfg, dist_info)
    if dist_info.world_size > 1 and not fsdp:
        raise ModelLoadError("model.fsdp = false needs a single process; set model.fsdp = true or auto under torchrun")
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        dtype = compute_dtype(cfg, device, dist_info.world_size)
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype != torch.float32 else None
        kw = {"mp_policy": mp} if mp is not None else {}
        for layer in decoder_layers(model):
            fully_shard(layer, reshard_after_forward=cfg.reshard_after_forward, **kw)
        fully_shard(model, reshard_after_forward=cfg.reshard_after_forward, **kw)
    elif compute_dtype(cfg, device, dist_info.world_size) != torch.float32:
        model.to(compute_dtype(cfg, device, dist_info.world_size))
    model.train()
    return model


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def is_lora(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


def hf_config(model: nn.Module):
    """The transformers config of the (possibly peft-wrapped) model."""
    base = model.get_base_model() if is_lora(model) else model
    return base.config
