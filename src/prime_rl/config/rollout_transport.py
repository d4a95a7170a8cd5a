"""`[rollout_transport]`: how each step's packed batches travel from the orchestrator to the trainer ranks.

Shared by `rl` (set it once at the top; it is copied into `[trainer]` and `[orchestrator]`). `filesystem` (the
default) writes `rollouts/step_N/rank_R.bin` into the run directory, which every trainer rank reads (a shared
filesystem across nodes); `tcp` sends the same msgpack bytes over ZMQ from the orchestrator to each trainer rank
(prime_rl.transport.zmq_rollouts), so no rollout file is written or read; with a `token` (or PRIME_RL_ROLLOUT_TOKEN)
the orchestrator answers only requests that carry it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from prime_rl.config.base import BaseConfig

ENV_TOKEN = "PRIME_RL_ROLLOUT_TOKEN"  # the shared secret of rollouts over tcp, when `token` is unset


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

    token: str | None = Field(
        None,
        description="tcp: a shared secret every trainer request carries; the orchestrator answers a request without "
        f"it (or with another) with an error. Also read from {ENV_TOKEN}. Unset: no check, except that rl gives "
        "trainer and orchestrator one random token when the orchestrator binds beyond loopback (multi-node).",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _zmq_is_tcp(cls, value: Any) -> Any:
        return "tcp" if value == "zmq" else value

    def secret(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The token in force: `token`, else the environment variable PRIME_RL_ROLLOUT_TOKEN of `environ` (default:
        this process's), else None (no check)."""
        env = os.environ if environ is None else environ
        return self.token or env.get(ENV_TOKEN) or None

    @property
    def endpoint(self) -> str:
        """`tcp://host:port` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"tcp://{host}:{self.port}"
