"""Where a run's processes go: `[deployment]` (nodes per role, processes/GPUs per node, placement of the
orchestrator and env server, bind addresses, ports) and `[slurm]` (the sbatch job that starts one launcher per
node). Shared by `rl` and `sft`.

Node indices are the order of the Slurm allocation (`SLURM_PROCID` with one task per node): in an `rl` job the
first `num_infer_nodes` nodes run inference replicas, the next `num_train_nodes` run the trainer (one torchrun
job over all of them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from prime_rl.config.base import BaseConfig

# Ports of node k in a multi-node run: port_base + PORT_STRIDE * k + offset (so roles sharing a host never collide).
PORT_STRIDE = 16
PORT_RENDEZVOUS = 0  # torchrun's rendezvous store (first trainer node)
PORT_ENV_SERVER = 1  # env servers: +1 .. +3
MAX_ENV_SERVERS = 3
PORT_INFERENCE = 4  # inference replicas: +4 .. +14
PORT_ROLLOUTS = 15  # the orchestrator's rollout port with rollout_transport.type = "tcp" (orchestrator node)
MAX_REPLICAS_PER_NODE = PORT_ROLLOUTS - PORT_INFERENCE
# Offsets that reuse a slot a node of that kind never binds otherwise:
PORT_WEIGHTS = PORT_INFERENCE  # the weight group's TCPStore (weight_transport.type = "collective"), first trainer node
PORT_CONTROL = PORT_RENDEZVOUS  # the node launchers' control store without a shared filesystem, node 0 (inference)


class DeploymentConfig(BaseConfig):
    """Device split and node layout.

    Single node: trainer on the first `num_train_gpus` GPUs, inference on the next `num_infer_gpus` (on CPU both
    share the cores, the trainer runs `cpu_train_procs` ranks). Multi-node (through Slurm): the same counts hold
    per node; `num_infer_nodes` nodes run `infer_replicas_per_node` inference servers each, `num_train_nodes`
    nodes run `num_train_gpus` (GPU) or `cpu_train_procs` (CPU) trainer ranks each.
    """

    type: Literal["single-node", "multi-node"] = Field(
        "single-node", description="single-node: every process on this host; multi-node: one launcher per Slurm node."
    )
    num_train_gpus: int = Field(1, gt=0, description="GPUs (trainer ranks) per trainer node.")
    num_infer_gpus: int = Field(1, gt=0, description="GPUs per inference node (split over its replicas).")
    cpu_train_procs: int = Field(1, gt=0, description="CPU only: trainer ranks (torchrun processes, gloo) per trainer node.")
    num_train_nodes: int = Field(1, gt=0, description="Nodes running the trainer (multi-node).")
    num_infer_nodes: int = Field(1, gt=0, description="Nodes running inference replicas (multi-node).")
    infer_replicas_per_node: int = Field(
        1, gt=0, le=MAX_REPLICAS_PER_NODE,
        description="Independent inference servers per inference node (the orchestrator spreads requests over all).",
    )
    orchestrator_node: int | None = Field(
        None, ge=0, description="Index of the node running the orchestrator; default: the first inference node (0)."
    )
    env_server_node: int | None = Field(
        None, ge=0, description="Index of the node running the env server(s) rl starts; default: the orchestrator's."
    )
    bind_host: str | None = Field(
        None,
        description="Multi-node: the address servers bind and other nodes reach; default: the node's address as "
        "Slurm knows it (NodeAddr). Single-node runs keep each server's own host (loopback by default).",
    )
    port_base: int = Field(
        29500, gt=1023, lt=65536 - PORT_STRIDE * 64,
        description=f"Multi-node: node k uses ports port_base + {PORT_STRIDE}k + 0..{PORT_STRIDE - 1} "
        f"(+{PORT_RENDEZVOUS} torchrun rendezvous, +{PORT_ENV_SERVER}.. env servers, +{PORT_INFERENCE}.. inference, "
        f"+{PORT_ROLLOUTS} the orchestrator's tcp rollout port; +{PORT_WEIGHTS} on the first trainer node: the weight "
        f"group's store with weight_transport.type = 'collective'; +{PORT_CONTROL} on node 0 with shared_fs = false: "
        "the node launchers' control store).",
    )
    rendezvous_timeout_s: float = Field(
        300.0, gt=0, description="Multi-node: how long nodes wait for each other (their files in output_dir/slurm/, "
        "or the control store on node 0 with shared_fs = false)."
    )
    shared_fs: bool = Field(
        True,
        description="Multi-node: whether output_dir is on a filesystem every node shares. false: each node keeps its "
        "own run directory output_dir/node_<k> (node-local disk), the nodes meet through a store on node 0 "
        f"(port_base + {PORT_CONTROL}), policy versions travel only over weight_transport.type = 'collective' and "
        "batches only over rollout_transport.type = 'tcp' (both required).",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _refuse_reference_type(cls, value: object) -> object:
        """`type` as given, unless it is the reference prime-rl's spelling ("single_node", "multi_node").

        Raises:
            ValueError: that spelling, naming the one here."""
        if value in ("single_node", "multi_node"):
            raise ValueError(f"type = {value!r} is the reference prime-rl's spelling; here it is "
                             f"{str(value).replace('_', '-')!r} (multi-node runs go through [slurm])")
        return value

    @property
    def num_nodes(self) -> int:
        """Nodes the run needs (1 for single-node)."""
        return self.num_infer_nodes + self.num_train_nodes if self.type == "multi-node" else 1

    @model_validator(mode="after")
    def _check_layout(self) -> DeploymentConfig:
        if self.type == "single-node":
            for name in ("num_train_nodes", "num_infer_nodes"):
                if getattr(self, name) != 1:
                    raise ValueError(
                        f"deployment.{name} = {getattr(self, name)} needs deployment.type = \"multi-node\" "
                        f"(a single-node run uses one node for every role)"
                    )
            for name in ("orchestrator_node", "env_server_node"):
                node = getattr(self, name)
                if node not in (None, 0):
                    raise ValueError(f"deployment.{name} = {node}: a single-node run has only node 0")
            for name, where in (("bind_host", "inference.server.host / env_server.host"),
                                ("shared_fs", "true: one host shares its own disk"),
                                ("port_base", "inference.server.port and the sources' resources_url"),
                                ("rendezvous_timeout_s", "nothing: one host needs no rendezvous")):  # fmt: skip
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(
                        f"deployment.{name} applies to multi-node runs only (deployment.type = \"multi-node\"); "
                        f"on one host it is {where}"
                    )
            return self
        num_nodes = self.num_nodes
        for name in ("orchestrator_node", "env_server_node"):
            node = getattr(self, name)
            if node is not None and node >= num_nodes:
                raise ValueError(
                    f"deployment.{name} = {node} but the run has {num_nodes} nodes (num_infer_nodes "
                    f"{self.num_infer_nodes} + num_train_nodes {self.num_train_nodes}), indices 0..{num_nodes - 1}"
                )
        return self

    def orchestrator_index(self) -> int:
        return self.orchestrator_node if self.orchestrator_node is not None else 0

    def env_server_index(self) -> int:
        return self.env_server_node if self.env_server_node is not None else self.orchestrator_index()

    def node_ports(self, index: int) -> int:
        """First port of node `index`'s block."""
        return self.port_base + PORT_STRIDE * index

    def rollout_port(self) -> int:
        """Multi-node: the orchestrator's rollout port (`rollout_transport.type = "tcp"`), in its node's block."""
        return self.node_ports(self.orchestrator_index()) + PORT_ROLLOUTS

    def trainer_index(self) -> int:
        """Multi-node: the first trainer node (torchrun node rank 0, where trainer rank 0 runs)."""
        return self.num_infer_nodes

    def weight_port(self) -> int:
        """Multi-node: the weight group's TCPStore port (`weight_transport.type = "collective"`) on the first trainer
        node, which runs no inference replica (its replica slots are free)."""
        return self.node_ports(self.trainer_index()) + PORT_WEIGHTS

    def control_port(self) -> int:
        """Multi-node with `shared_fs = false`: the node launchers' control store on node 0 (an inference node: the
        rendezvous slot is used only on the first trainer node)."""
        return self.node_ports(0) + PORT_CONTROL

    def node_dir(self, output_dir: Path, index: int) -> Path:
        """The run directory of node `index`: `output_dir` itself, or `output_dir/node_<index>` with
        `shared_fs = false` (each node's own, on its local disk)."""
        return Path(output_dir) if self.shared_fs else Path(output_dir) / f"node_{index}"


class SlurmConfig(BaseConfig):
    """Submit the run as a Slurm batch job: `rl @ cfg.toml` renders `output_dir/slurm/rl.sbatch` (`sft`:
    `sft.sbatch`) from a packaged Jinja2 template and submits it with `sbatch`."""

    job_name: str = Field("prime-rl", description="#SBATCH --job-name.")
    partition: str | None = Field(None, description="#SBATCH --partition; None = the cluster's default.")
    account: str | None = Field(None, description="#SBATCH --account.")
    time: str | None = Field(None, description="#SBATCH --time (e.g. 2:00:00 or 1-00:00:00); None = partition default.")
    nodes: int | None = Field(
        None, gt=0, description="#SBATCH --nodes; default (and the only accepted value): what [deployment] needs."
    )
    gpus_per_node: int | None = Field(None, ge=0, description="#SBATCH --gpus-per-node; None = not requested.")
    sbatch_lines: list[str] = Field(
        default_factory=list, description="Extra `#SBATCH` lines, e.g. [\"--exclusive\", \"--mem=0\"] (prefix optional)."
    )
    setup: list[str] = Field(
        default_factory=list,
        description="Shell lines run on every node before the launcher (module load, source a venv, exports).",
    )
    template: Path | None = Field(None, description="Your own Jinja2 sbatch template; None = the packaged one.")
    python: str | None = Field(
        None, description="Python on the nodes; None = the interpreter running `rl` (works with a shared venv)."
    )
    workdir: Path | None = Field(None, description="Directory the job runs in; None = where `rl` was started.")

    @model_validator(mode="after")
    def _check_lines(self) -> SlurmConfig:
        for i, line in enumerate(self.sbatch_lines):
            if "\n" in line or not line.strip():
                raise ValueError(f"slurm.sbatch_lines[{i}] = {line!r}: one non-empty option per entry, no newlines")
        return self


def check_slurm_nodes(slurm: SlurmConfig | None, needed: int, what: str) -> None:
    """`slurm.nodes` must equal what the deployment needs (`what` names the fields that decide it).

    Raises:
        ValueError: they differ (names both fields).
    """
    if slurm is not None and slurm.nodes is not None and slurm.nodes != needed:
        raise ValueError(f"slurm.nodes = {slurm.nodes} but {what} = {needed}; leave slurm.nodes unset or make them agree")


class SFTDeploymentConfig(BaseConfig):
    """`sft` on several nodes: one torchrun job of `num_nodes` x (`num_gpus` on GPU | `cpu_procs` on CPU) ranks."""

    num_nodes: int = Field(1, gt=0, description="Nodes of the torchrun job (through [slurm]).")
    num_gpus: int = Field(1, gt=0, description="GPUs (ranks) per node on GPU.")
    cpu_procs: int = Field(1, gt=0, description="Ranks per node on CPU (gloo).")
    port_base: int = Field(29500, gt=1023, lt=65536, description="torchrun c10d rendezvous port on the first node.")



def check_sft_deployment(dep: SFTDeploymentConfig, slurm: SlurmConfig | None) -> None:
    """Without `[slurm]` these settings would not take effect (sft is one process unless torchrun starts it).

    Raises:
        ValueError: one of them is set without `[slurm]` (names it and the alternative)."""
    if slurm is not None:
        return
    if dep.num_nodes > 1:
        raise ValueError(
            f"deployment.num_nodes = {dep.num_nodes} needs a [slurm] section (sft starts several nodes only through Slurm)"
        )
    for name in ("num_gpus", "cpu_procs", "port_base"):
        if getattr(dep, name) != type(dep).model_fields[name].default:
            raise ValueError(
                f"deployment.{name} applies to [slurm] runs; on one host start ranks yourself: "
                f"`torchrun --nproc-per-node N -m prime_rl.cli.sft @ cfg.toml`"
            )
