"""`[rollout_transport]`: how each step's packed batches travel from the orchestrator to the trainer ranks.

Shared by `rl` (set it once at the top; it is copied into `[trainer]` and `[orchestrator]`). `filesystem` (the
default) writes `rollouts/step_N/rank_R.bin` into the run directory, which every trainer rank reads (a shared
filesystem across nodes); `tcp` sends the same msgpack bytes over ZMQ from the orchestrator to each trainer rank
(prime_rl.transport.zmq_rollouts), so no rollout file is written or read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from prime_rl.config.base import BaseConfig


class RolloutTransportConfig(BaseConfig):
    """The transport of the trainer's batches (see the module docstring and docs/scaling.md)."""

    type: Literal["filesystem", "tcp"] = Field(
        "filesystem",
        description="filesystem = rollouts/step_N/rank_R.bin in the run directory; tcp = the same bytes over ZMQ "
        "from the orchestrator to each trainer rank, held by the orchestrator until the trainer no longer needs them "
        "for a resume ('zmq' is read as tcp).",
    )
    host: str = Field(
        "127.0.0.1",
        description="tcp: the address the orchestrator binds, and the one the trainer connects to (a multi-node rl "
        "run sets both from the orchestrator's node: deployment.bind_host, else the node's address).",
    )
    port: int = Field(
        29650, gt=0, le=65535,
        description="tcp: the orchestrator's TCP port for the trainer ranks (single-node; a multi-node run uses "
        "deployment.port_base + 16k + 15, k: the orchestrator's node).",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _zmq_is_tcp(cls, value: Any) -> Any:
        return "tcp" if value == "zmq" else value

    @property
    def endpoint(self) -> str:
        """`tcp://host:port` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"tcp://{host}:{self.port}"
