"""`[weight_transport]`: how each policy version travels from the trainer to the inference servers.

Shared by `rl` (set it once at the top; it is copied into `[trainer]` and `[orchestrator]`). `filesystem` (the
default) writes the version's safetensors to `weights/step_N/`, which every inference server reads (a shared
filesystem across nodes); `collective` broadcasts the full state dict from trainer rank 0 to every inference worker
through a torch.distributed group of its own (gloo on CPU, NCCL on GPU; prime_rl.transport.weight_collective), and
`weights/step_N/` holds only a small `transport.json` plus `STABLE` that tell the orchestrator the version is ready.
LoRA adapters are always published as files: `collective` with `trainer.model.lora` is refused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from prime_rl.config.base import BaseConfig


class WeightTransportConfig(BaseConfig):
    """The transport of policy versions (see the module docstring and docs/scaling.md)."""

    type: Literal["filesystem", "collective"] = Field(
        "filesystem",
        description="filesystem = safetensors in weights/step_N/ read by every inference server; collective = the "
        "full state dict broadcast from trainer rank 0 to every inference worker (gloo on CPU, NCCL on GPU).",
    )
    host: str = Field(
        "127.0.0.1",
        description="collective: the address of trainer rank 0, which hosts the group's TCPStore (the inference "
        "workers connect to it).",
    )
    port: int = Field(29660, gt=0, le=65535, description="collective: the TCPStore port on trainer rank 0.")
    inference_workers: int | None = Field(
        None, gt=0,
        description="collective: the number of inference workers in the group (every server's tensor-parallel ranks "
        "summed); the group has this many + 1 ranks. rl sets it from its inference replicas; a standalone trainer "
        "and orchestrator need it set.",
    )
    timeout_s: float = Field(
        600.0, gt=0, description="collective: how long joining the group, or one version's transfer, waits for the "
        "other ranks before the update fails.",
    )

    @property
    def address(self) -> str:
        """`tcp://host:port` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"tcp://{host}:{self.port}"

    def group_spec(self, section: str):
        """The group to join (a `prime_rl.transport.weight_collective.GroupSpec`). Raises ValueError naming `<section>.weight_transport.inference_workers` when unset."""
        from prime_rl.transport.weight_collective import GroupSpec  # torch: only where the group is joined

        if self.inference_workers is None:
            raise ValueError(
                f"{section}.weight_transport.type = 'collective' needs {section}.weight_transport.inference_workers "
                "(the inference servers' worker count: servers x tensor_parallel_size); rl sets it, a standalone "
                "process must be given it"
            )
        return GroupSpec(self.address, self.inference_workers + 1, self.timeout_s)
