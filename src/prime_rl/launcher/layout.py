"""Where a run's processes go: the nodes of a run (`Layout`), the roles of each node (`NodeRoles`) and the inference
replicas with their addresses and ports.

A single-node run is the one-node layout: node 0 runs every role, replica j listens on `inference.server.port + j`
at `inference.server.host`. A multi-node run (`[deployment] type = "multi-node"`, index = SLURM_PROCID): nodes
0 .. num_infer_nodes-1 run `infer_replicas_per_node` inference servers each; the next num_train_nodes nodes run the
trainer, one torchrun job over all of them (static rendezvous on the first trainer node, which runs rank 0); the
orchestrator runs on `deployment.orchestrator_node` (default 0) and the env server(s) rl starts on
`deployment.env_server_node` (default: the orchestrator's node). Node k's ports are `port_base + 16k + offset`
(config/deployment.py), so roles sharing one host never collide.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from prime_rl.config.deployment import PORT_ENV_SERVER, PORT_INFERENCE, PORT_RENDEZVOUS, DeploymentConfig
from prime_rl.config.rl import RLConfig

ALL_ROLES = ["inference", "trainer", "orchestrator", "env-server"]


class Layout(BaseModel):
    """The nodes of a run as this process sees them.

    `addrs`: the address other nodes reach each node at, in allocation order (single-node: loopback).
    `index`: the node this process runs on. `here`: whether this process runs on node `index` inside the run, so
    that its ports and devices can be checked (False when `rl` submits a Slurm job or dry-runs one from a login node:
    each node checks its own when the job starts). `job_id`: the Slurm job (multi-node)."""

    kind: Literal["single-node", "multi-node"] = "single-node"
    addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1"])
    index: int = 0
    here: bool = True
    job_id: str | None = None

    @classmethod
    def single(cls) -> Layout:
        """A single-node run on this machine."""
        return cls()

    @classmethod
    def submit(cls, cfg: RLConfig) -> Layout:
        """A Slurm job not started yet (`rl` with `[slurm]`): node addresses are unknown, nothing is checked that
        needs the nodes themselves."""
        num_nodes = cfg.deployment.num_nodes
        return cls(kind=cfg.deployment.type, addrs=[f"node{i}" for i in range(num_nodes)], here=False)

    @classmethod
    def slurm(cls, kind: str, addrs: list[str], index: int, job_id: str) -> Layout:
        """Node `index` of a running Slurm job whose nodes are at `addrs`."""
        return cls(kind=kind, addrs=list(addrs), index=index, here=True, job_id=job_id)

    @property
    def multi(self) -> bool:
        """Whether the run spans several nodes (`[deployment] type = "multi-node"`)."""
        return self.kind == "multi-node"


class NodeRoles(BaseModel):
    """What node `index` runs: `roles` (inference, trainer, orchestrator, env-server), its global replica
    indices and their ports, and its torchrun node rank (trainer nodes)."""

    index: int
    roles: list[str] = Field(default_factory=list)
    replicas: list[int] = Field(default_factory=list)
    replica_ports: list[int] = Field(default_factory=list)
    train_rank: int | None = None

    def describe(self, dep: DeploymentConfig) -> str:
        """One line: the node's replicas and ports, trainer rank, orchestrator and env server."""
        parts = []
        if self.replicas:
            parts.append("inference " + ", ".join(f"replica {r} :{p}" for r, p in zip(self.replicas, self.replica_ports, strict=True)))
        if self.train_rank is not None:
            rz = f", rendezvous :{rendezvous_port(dep)}" if self.train_rank == 0 else ""
            parts.append(f"trainer (torchrun node {self.train_rank} of {dep.num_train_nodes}{rz})")
        if "orchestrator" in self.roles:
            parts.append("orchestrator")
        if "env-server" in self.roles:
            base = dep.node_ports(self.index) + PORT_ENV_SERVER
            parts.append(f"env-server :{base}")
        return "; ".join(parts)


class Replica(BaseModel, frozen=True):
    """Inference replica `index` (global over the run): where it binds, where others reach it, and its names."""

    index: int
    bind_host: str
    addr: str
    port: int

    @property
    def name(self) -> str:
        """The child's name: `inference` for replica 0, `inference-<i>` for the others."""
        return "inference" if self.index == 0 else f"inference-{self.index}"

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}"

    @property
    def health_url(self) -> str:
        return self.url + "/health"


def layout(dep: DeploymentConfig) -> list[NodeRoles]:
    """The role of every node of a multi-node run, by index (the order of the Slurm allocation)."""
    nodes = [NodeRoles(index=i) for i in range(dep.num_nodes)]
    rpn = dep.infer_replicas_per_node
    for node_idx in range(dep.num_infer_nodes):
        node = nodes[node_idx]
        node.roles.append("inference")
        node.replicas = [node_idx * rpn + j for j in range(rpn)]
        node.replica_ports = [dep.node_ports(node_idx) + PORT_INFERENCE + j for j in range(rpn)]
    for train_idx in range(dep.num_train_nodes):
        node = nodes[dep.num_infer_nodes + train_idx]
        node.roles.append("trainer")
        node.train_rank = train_idx
    nodes[dep.orchestrator_index()].roles.append("orchestrator")
    nodes[dep.env_server_index()].roles.append("env-server")
    return nodes


def node_roles(cfg: RLConfig, where: Layout) -> list[NodeRoles]:
    """Every node's roles: `layout` for a multi-node run, one node running everything for a single-node run."""
    if where.multi:
        return layout(cfg.deployment)
    rpn, port = cfg.deployment.infer_replicas_per_node, cfg.inference.server.port
    return [NodeRoles(index=0, roles=list(ALL_ROLES), replicas=list(range(rpn)),
                      replica_ports=[port + j for j in range(rpn)], train_rank=0)]  # fmt: skip


def rendezvous_node(dep: DeploymentConfig) -> int:
    """Index of the first trainer node (hosts torchrun's rendezvous and trainer rank 0)."""
    return dep.num_infer_nodes


def rendezvous_port(dep: DeploymentConfig) -> int:
    """The torchrun rendezvous port on the first trainer node."""
    return dep.node_ports(rendezvous_node(dep)) + PORT_RENDEZVOUS


def reach_addr(host: str) -> str:
    """The address to connect to a server bound at `host` on this machine (wildcards and names -> loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "localhost", "::") else host


def local_replicas(cfg: RLConfig) -> list[Replica]:
    """The replicas of a single-node run: `infer_replicas_per_node` servers on consecutive ports."""
    server = cfg.inference.server
    return [Replica(index=j, bind_host=server.host, addr=reach_addr(server.host), port=server.port + j)
            for j in range(cfg.deployment.infer_replicas_per_node)]  # fmt: skip


def all_replicas(dep: DeploymentConfig, addrs: list[str]) -> list[Replica]:
    """Every replica of a multi-node run, with the address other nodes reach it at and the address it binds."""
    out = []
    for node in layout(dep):
        for replica, port in zip(node.replicas, node.replica_ports, strict=True):
            out.append(Replica(index=replica, bind_host=dep.bind_host or addrs[node.index], addr=addrs[node.index],
                               port=port))
    return out


def run_replicas(cfg: RLConfig, where: Layout) -> list[Replica]:
    """The inference replicas of the run laid out as `where`."""
    return all_replicas(cfg.deployment, where.addrs) if where.multi else local_replicas(cfg)


def finisher_nodes(dep: DeploymentConfig) -> list[int]:
    """Indices of the nodes that run a trainer or the orchestrator (the job is done when all of them finished)."""
    return [n.index for n in layout(dep) if {"trainer", "orchestrator"} & set(n.roles)]
