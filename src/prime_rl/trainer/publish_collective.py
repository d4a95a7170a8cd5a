"""Publishing policy versions over the weight group (`weight_transport.type = "collective"`).

Per version N: every trainer rank gathers the full state dict (as for files); rank 0 prepares the same tensors the
file path would write (HF names, a tied output head left out, the publish dtype, finite: `publish.check_finite_weights`),
writes `weights/step_N/transport.json` + `STABLE` (the orchestrator's signal that version N is ready; no model file),
then broadcasts the tensors to every inference worker (prime_rl.transport.weight_collective) and returns once all of
them received the version. Rank 0 joins the group at the first version (the workers join when the orchestrator asks
their servers for it) and holds it for the run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from prime_rl.config.trainer import WeightsConfig
from prime_rl.config.weight_transport import WeightTransportConfig
from prime_rl.trainer.dist import DistInfo, barrier
from prime_rl.trainer.model import hf_config, is_lora
from prime_rl.trainer.publish import check_finite_weights, check_output_head, full_state_dict, prune_step_dirs
from prime_rl.transport.atomic import STABLE, atomic_write_dir
from prime_rl.transport.weight_collective import WeightGroup

TRANSPORT_FILE = "transport.json"


class CollectivePublisher:
    """Sends policy versions from trainer rank 0 over the weight group described by `cfg` (other ranks only take
    part in gathering the state dict)."""

    def __init__(self, cfg: WeightTransportConfig, dist_info: DistInfo):
        self.cfg, self.dist = cfg, dist_info
        self.spec = cfg.group_spec("trainer")
        self.group: WeightGroup | None = None
        # called on rank 0 with the version once it is marked ready, before the group opens: tells an orchestrator
        # that cannot see this node's weights/ (rollouts over tcp) to start the inference servers' update
        self.announce: Callable[[int], None] | None = None

    def publish(self, model: nn.Module, weights_dir: Path, step: int, weights: WeightsConfig,
                dtype: torch.dtype = torch.float32) -> dict | None:  # fmt: skip
        """Publish version `step` (collective over the trainer's ranks). Returns rank 0's {"num_tensors", "bytes",
        "buckets", "join_s", "send_s"}, None elsewhere. Raises NonFiniteWeights (nothing sent or marked),
        RuntimeError for a LoRA model or an output head that would not load as trained, WeightTransferError (an
        inference worker did not join or receive within weight_transport.timeout_s)."""
        if is_lora(model):
            raise RuntimeError("weight_transport.type = 'collective' cannot publish a LoRA model (trainer.model.lora)")
        sd = full_state_dict(model)
        out = None
        if self.dist.is_main:
            config = hf_config(model)
            check_output_head(sd, config)
            msd = dict(sd)
            if getattr(config, "tie_word_embeddings", False):
                msd.pop("lm_head.weight", None)
            msd = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in msd.items()}
            check_finite_weights(msd, step)
            meta = {"transport": "collective", "address": self.spec.address, "version": step,
                    "num_tensors": len(msd)}  # fmt: skip
            atomic_write_dir(Path(weights_dir) / f"step_{step}",
                             lambda tmp: (tmp / TRANSPORT_FILE).write_text(json.dumps(meta)), marker=STABLE)  # fmt: skip
            prune_step_dirs(Path(weights_dir), weights.keep_last)
            if self.announce is not None:
                self.announce(step)
            t0 = time.perf_counter()
            if self.group is None or self.group.closed:
                self.group = WeightGroup.open(self.spec, 0, self.dist.device)
            t1 = time.perf_counter()
            out = {**self.group.send(step, msd), "join_s": t1 - t0, "send_s": time.perf_counter() - t1}
        barrier()
        return out

    def close(self) -> None:
        """Leave the weight group (rank 0; idempotent)."""
        if self.group is not None:
            self.group.close()
            self.group = None
