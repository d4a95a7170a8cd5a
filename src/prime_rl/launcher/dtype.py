"""One compute dtype for the trainer and the inference servers of a run.

The trainer's logprobs are compared with the ones vLLM sampled with (importance ratio, mismatch KL), so both must
compute in the same dtype. On GPU `auto` is bfloat16 in both. On CPU `auto` depends on the host
(`prime_rl.cpu_bf16`: native bf16 matmul that measures faster than fp32), so the launch plan decides it once here
and writes the explicit dtype into the trainer's and every replica's config; neither process runs the check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prime_rl.config.rl import RLConfig
from prime_rl.cpu_bf16 import MIN_HIDDEN, Bf16Check, cpu_check, model_width

log = logging.getLogger("prime_rl.rl")

SHARED_DTYPES = ("float32", "bfloat16")  # the dtypes both the trainer and vLLM take


def inference_dtype(cfg: RLConfig) -> str:
    """The inference server's dtype setting: `inference.vllm.dtype`, else `inference.model.dtype` (may be auto)."""
    vllm_dtype = cfg.inference.vllm.dtype
    return vllm_dtype if vllm_dtype != "auto" else cfg.inference.model.dtype


def run_dtypes(
    cfg: RLConfig, device: str, multi: bool, check: Callable[[], Bf16Check] | None = None
) -> dict[str, Any]:
    """The config changes (`evolve` paths) that give the trainer and inference one explicit dtype on CPU.

    On CPU, for the sections whose dtype is `auto`: the other section's explicit float32/bfloat16 when it has one,
    else float32 for a model narrower than `cpu_bf16.MIN_HIDDEN` (its `config.json` hidden size), else float32 in a
    multi-node run (each node would measure on its own), else `check().dtype` (the host's bf16 check, run once). `orchestrator.model.dtype` follows, so the sections' models stay alike. Nothing changes
    on GPU (`auto` is bfloat16 in both) or when both dtypes are explicit.

    Args:
        device: "cpu" or "cuda" (the placement's device).
        multi: a multi-node run.
        check: the bf16 check (default `cpu_bf16.cpu_check`, once per process).
    """
    trainer, inference = cfg.trainer.model.dtype, inference_dtype(cfg)
    if device != "cpu" or "auto" not in (trainer, inference):
        return {}
    explicit = [d for d in (trainer, inference) if d != "auto"]
    if explicit and explicit[0] not in SHARED_DTYPES:
        return {}  # e.g. vLLM float16, which the trainer has no counterpart of: left to the user
    if explicit:
        dtype = explicit[0]
        log.info("dtype auto on CPU follows the other process's explicit dtype: trainer and inference use %s", dtype)
    elif (width := model_width(cfg.trainer.model.name)) is not None and width < MIN_HIDDEN:
        dtype = "float32"
        log.info("dtype auto on CPU: float32 (model hidden size %d < %d: bf16 casts outweigh its matmul gain)",
                 width, MIN_HIDDEN)  # fmt: skip
    elif multi:
        dtype = "float32"
        log.info("dtype auto on CPU in a multi-node run: float32 (set model.dtype to use bfloat16)")
    else:
        dtype = (check or cpu_check)().dtype
    changes: dict[str, Any] = {}
    if trainer == "auto":
        changes["trainer.model.dtype"] = dtype
    if inference == "auto":
        changes["inference.model.dtype"] = dtype
    if cfg.orchestrator.model.dtype == "auto":
        changes["orchestrator.model.dtype"] = dtype
    return changes
