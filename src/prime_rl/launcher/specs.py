"""The child commands of one node of a run, built once from its launch plan (`plan.RunPlan`): env servers,
inference replicas, the trainer (torchrun: standalone on one node, a static rendezvous over the trainer nodes of a
multi-node run, trainer rank 0 on the first trainer node) and the orchestrator, each with its log and the
environment its device placement gives it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from prime_rl.config.rl import RLConfig
from prime_rl.launcher import envserver, preflight, replicas
from prime_rl.launcher.layout import rendezvous_node, rendezvous_port
from prime_rl.launcher.placement import Placement
from prime_rl.launcher.plan import RunPlan
from prime_rl.monitor.rundir import RunDir
from prime_rl.ports import free_port
from prime_rl.process import ChildSpec


@dataclass
class NodeSpecs:
    """This node's children (`specs`, start order), the health URLs of its own servers (`own`), and on the
    orchestrator's node every server the orchestrator needs before it starts (`needs`)."""

    specs: dict[str, ChildSpec] = field(default_factory=dict)
    own: dict[str, str] = field(default_factory=dict)
    needs: dict[str, str] = field(default_factory=dict)


def node_specs(cfg: RLConfig, plan: RunPlan, index: int, placement: Placement, node_name: str | None = None) -> NodeSpecs:
    """The children node `index` runs under `plan`. `cfg`: the run config (its `[env_server]` and `[deployment]`
    settings); `placement`: this node's devices; `node_name`: set as PRIME_RL_NODE in a multi-node run.

    Raises:
        PreflightError: (multi-node) a port this node binds is taken."""
    run = RunDir(plan.run_dir)
    multi = plan.layout.multi
    sfx = f".node{index}" if multi else ""
    out = NodeSpecs()
    mine = {p.name for p in plan.on_node(index)}
    for i, ep in enumerate(plan.env_servers):
        name = "env-server" if i == 0 else f"env-server-{i}"
        if name not in mine:
            continue
        spec = envserver.serve_spec(cfg, ep, run.log_file(f"{name}.console"), name=name, token=plan.env_token)
        spec.env.update(placement.env_for("env-server"))
        out.specs[name], out.own[name] = spec, ep.health_url
    node_replicas = [r for r in plan.replicas if r.name in mine]
    per_node = cfg.deployment.infer_replicas_per_node
    for j, rep in enumerate(node_replicas):
        out.specs[rep.name] = replicas.replica_spec(run, rep, placement.replica_env(j, per_node))
        out.own[rep.name] = rep.health_url
    if "teacher" in mine:  # on-policy distillation's teacher server (`[teacher]`), beside replica 0
        argv = [sys.executable, "-m", "prime_rl.cli.inference", "@", str(run.configs / "teacher.toml")]
        out.specs["teacher"] = ChildSpec("teacher", argv, run.log_file("teacher.console"), placement.replica_env(0, 1))
        out.own["teacher"] = plan.process("teacher").health_url
    if "trainer" in mine:
        out.specs["trainer"] = ChildSpec("trainer", _torchrun(cfg, plan, index, placement) +
                                         ["-m", "prime_rl.cli.trainer", "@", str(run.configs / "trainer.toml")],
                                         run.log_file(f"trainer{sfx}.console"), placement.env_for("trainer"))  # fmt: skip
    if "orchestrator" in mine:
        argv = [sys.executable, "-m", "prime_rl.cli.orchestrator", "@", str(run.configs / "orchestrator.toml")]
        out.specs["orchestrator"] = ChildSpec("orchestrator", argv, run.log_file("orchestrator.console"),
                                              placement.env_for("orchestrator"))  # fmt: skip
        out.needs = {r.name: r.health_url for r in plan.replicas}
        if cfg.teacher is not None:
            out.needs["teacher"] = plan.process("teacher").health_url
        out.needs.update({f"env server {p.url}": p.health_url for p in plan.env_servers})
    if multi:
        for spec in out.specs.values():
            spec.env.setdefault("PRIME_RL_NODE", node_name or f"node{index}")
        wanted = [(r.bind_host, r.port, f"inference replica {r.index} (deployment.port_base)") for r in node_replicas]
        wanted += [(ep.host, ep.port, f"env server {ep.url} (deployment.port_base)")
                   for i, ep in enumerate(plan.env_servers) if ("env-server" if i == 0 else f"env-server-{i}") in mine]
        if plan.nodes[index].train_rank == 0:
            wanted.append((plan.layout.addrs[index], rendezvous_port(cfg.deployment),
                           "torchrun rendezvous (deployment.port_base)"))  # fmt: skip
            wanted += [(cfg.deployment.bind_host or plan.layout.addrs[index], port,
                        "trainer rank 0's weight group store (deployment.port_base)")
                       for port in plan.process("trainer").ports]  # fmt: skip (plan.weight_hosts)
        if "orchestrator" in mine:  # its tcp rollout port, if any (plan.rollout_hosts)
            wanted += [(cfg.deployment.bind_host or plan.layout.addrs[index], port,
                        "the orchestrator's tcp rollout port (deployment.port_base)")
                       for port in plan.process("orchestrator").ports]  # fmt: skip
        preflight.check_free(wanted)
    return out


def _torchrun(cfg: RLConfig, plan: RunPlan, index: int, placement: Placement) -> list[str]:
    """torchrun's argv up to the module: standalone on one node; over the trainer nodes of a multi-node run, the
    static rendezvous with this node's `--node-rank` (its position among the trainer nodes), so trainer node k runs
    global ranks k x procs .. (k + 1) x procs - 1 and rank 0 is on the first trainer node, whose address the plan
    gives the inference nodes (`plan.weight_hosts`). torchrun's c10d rendezvous would order the nodes by address
    instead, leaving rank 0 on any of them."""
    base = [sys.executable, "-m", "torch.distributed.run"]
    if not plan.layout.multi:
        return base + ["--nproc-per-node", str(placement.trainer_procs), "--master-addr", "127.0.0.1",
                       "--master-port", str(free_port())]  # fmt: skip
    dep = cfg.deployment
    rank = plan.nodes[index].train_rank
    return base + ["--nnodes", str(dep.num_train_nodes), "--nproc-per-node", str(placement.trainer_procs),
                   "--node-rank", str(rank), "--rdzv-backend", "static",
                   "--master-addr", plan.layout.addrs[rendezvous_node(dep)], "--master-port", str(rendezvous_port(dep)),
                   "--rdzv-id", f"prime-rl-{plan.layout.job_id}",
                   "--local-addr", plan.layout.addrs[index], "--max-restarts", "0"]  # fmt: skip
