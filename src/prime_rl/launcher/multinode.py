"""One launcher per node of a multi-node `rl` run (`python -m prime_rl.cli.rl_node @ configs/rl.toml`, started
by `srun` from the rendered sbatch script, one task per node).

Node layout (`layout`, index = SLURM_PROCID): nodes 0 .. num_infer_nodes-1 run `infer_replicas_per_node`
inference servers each; the next num_train_nodes nodes run the trainer, one torchrun job over all of them with the
c10d rendezvous on the first trainer node; the orchestrator runs on `deployment.orchestrator_node` (default 0) and
the env server(s) rl starts on `deployment.env_server_node` (default: the orchestrator's node). Node k's ports are
`port_base + 16k + offset` (config/deployment.py), so roles sharing one host never collide.

A node's life: announce itself in the job directory and wait to see every other node there (the shared-filesystem
check); node 0 prepares the run (pre-flight checks, resume/clean, rows, every role's config) and writes the plan;
start this node's processes; the orchestrator node waits for every replica and env server before starting the
orchestrator; then supervise until every trainer and orchestrator of the job finished (exit 0), a process on any
node died (exit 1, naming the node and the process), or Slurm sent SIGTERM (scancel, time limit: exit 143).
Every process this node started is stopped on the way out.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from prime_rl.config.deployment import (
    MAX_ENV_SERVERS,
    PORT_ENV_SERVER,
    PORT_INFERENCE,
    PORT_RENDEZVOUS,
    DeploymentConfig,
)
from prime_rl.config.rl import RLConfig
from prime_rl.launcher import envserver, preflight, replicas
from prime_rl.launcher.cluster import JobDir, SlurmNode, slurm_node
from prime_rl.launcher.errors import ChildFailed, Interrupted, LaunchError, PreflightError
from prime_rl.launcher.placement import place
from prime_rl.launcher.supervisor import Supervisor, handle_signals
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.rundir import RunDir
from prime_rl.process import ChildSpec, describe_exit, http_ok

log = logging.getLogger("prime_rl.rl")

FINISHERS = {"trainer", "orchestrator"}


@dataclass
class NodeRoles:
    """What node `index` runs: `roles` (inference, trainer, orchestrator, env-server), its global replica
    indices and their ports, and its torchrun node rank (trainer nodes)."""

    index: int
    roles: list[str] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    replica_ports: list[int] = field(default_factory=list)
    train_rank: int | None = None

    def describe(self, dep: DeploymentConfig) -> str:
        parts = []
        if self.replicas:
            parts.append("inference " + ", ".join(f"replica {r} :{p}" for r, p in zip(self.replicas, self.replica_ports, strict=True)))
        if self.train_rank is not None:
            rz = f", c10d rendezvous :{rendezvous_port(dep)}" if self.train_rank == 0 else ""
            parts.append(f"trainer (torchrun node {self.train_rank} of {dep.num_train_nodes}{rz})")
        if "orchestrator" in self.roles:
            parts.append("orchestrator")
        if "env-server" in self.roles:
            base = dep.node_ports(self.index) + PORT_ENV_SERVER
            parts.append(f"env-server :{base}")
        return "; ".join(parts)


def layout(dep: DeploymentConfig) -> list[NodeRoles]:
    """The role of every node of a multi-node run, by index (the order of the Slurm allocation)."""
    nodes = [NodeRoles(i) for i in range(dep.num_nodes)]
    rpn = dep.infer_replicas_per_node
    for k in range(dep.num_infer_nodes):
        n = nodes[k]
        n.roles.append("inference")
        n.replicas = [k * rpn + j for j in range(rpn)]
        n.replica_ports = [dep.node_ports(k) + PORT_INFERENCE + j for j in range(rpn)]
    for t in range(dep.num_train_nodes):
        n = nodes[dep.num_infer_nodes + t]
        n.roles.append("trainer")
        n.train_rank = t
    nodes[dep.orchestrator_index()].roles.append("orchestrator")
    nodes[dep.env_server_index()].roles.append("env-server")
    return nodes


def rendezvous_node(dep: DeploymentConfig) -> int:
    """Index of the first trainer node (hosts torchrun's c10d rendezvous)."""
    return dep.num_infer_nodes


def rendezvous_port(dep: DeploymentConfig) -> int:
    return dep.node_ports(rendezvous_node(dep)) + PORT_RENDEZVOUS


def all_replicas(dep: DeploymentConfig, addrs: list[str]) -> list[replicas.Replica]:
    """Every replica of the run, with the address other nodes reach it at and the address it binds."""
    out = []
    for n in layout(dep):
        for r, port in zip(n.replicas, n.replica_ports, strict=True):
            out.append(replicas.Replica(r, dep.bind_host or addrs[n.index], addrs[n.index], port))
    return out


def plan_env(cfg: RLConfig, node: SlurmNode, plans: list[envserver.EnvServerPlan]) -> None:
    """Move the env servers rl starts to the env-server node's address and ports, with a bearer token when they
    bind a non-loopback address (generated when `env_server.token` is unset), and point the sources at them."""
    dep = cfg.deployment
    if len(plans) > MAX_ENV_SERVERS:
        raise PreflightError(f"a multi-node run starts at most {MAX_ENV_SERVERS} env servers, the sources need {len(plans)}")
    k = dep.env_server_index()
    addr = node.addrs[k]
    host = cfg.env_server.host or dep.bind_host or addr
    for i, plan in enumerate(plans):
        old = plan.url
        plan.host, plan.port = host, dep.node_ports(k) + PORT_ENV_SERVER + i
        plan.url = f"http://{addr}:{plan.port}"
        for _, src in envserver.nemo_sources(cfg):
            if src.env.taskset.task.resources_url.rstrip("/") == old:
                src.env.taskset.task.resources_url = plan.url
    envserver.bind_plans(cfg, plans)


def prepare_head(cfg: RLConfig, node: SlurmNode) -> dict:
    """Node 0: pre-flight checks, resume/clean, rows, env-server plan and every role's config file. Returns the
    plan the other nodes need (JSON-able)."""
    from prime_rl.config.loader import write_config
    from prime_rl.launcher.rl import resume_or_clean

    run = RunDir(preflight.check_run_dirs(cfg))
    preflight.check_sizes(cfg)
    preflight.check_model(cfg)
    plans = envserver.plan_env_servers(cfg)
    preflight.check_data(cfg, plans)
    preflight.check_capacity(cfg, plans)
    start_step = resume_or_clean(cfg, run)
    for plan in plans:
        if plan.write_root is not None:
            log.info(f"rows missing: writing them with `env-server write {cfg.env_server.env} {plan.write_root}`")
            envserver.write_rows(cfg, plan, run.log_file("env-server-write"), cfg.startup_timeout_s)
    plan_env(cfg, node, plans)
    placement = place(cfg, roles=set(layout(cfg.deployment)[node.index].roles))
    dep = cfg.deployment
    cfg.orchestrator.num_train_ranks = placement.trainer_procs * dep.num_train_nodes
    reps = all_replicas(dep, node.addrs)
    cfg.orchestrator.client.base_url = [r.url for r in reps]
    write_config(cfg.trainer, run.configs / "trainer.toml")
    write_config(cfg.orchestrator, run.configs / "orchestrator.toml")
    replicas.write_replica_configs(cfg, run, reps, multi=True)
    return {
        "start_step": start_step,
        "env_servers": [{"url": p.url, "host": p.host, "port": p.port, "serve_dir": str(p.serve_dir), "sources": p.sources}
                        for p in plans],
        "env_token": cfg.env_server.token,
        "replicas": [r.url for r in reps],
    }


def node_specs(cfg: RLConfig, node: SlurmNode, plan: dict, run: RunDir) -> tuple[dict[str, ChildSpec], dict[str, str], dict[str, str]]:
    """This node's children, the health URLs of its own servers, and (orchestrator node) every server the
    orchestrator needs before it starts."""
    dep = cfg.deployment
    me = layout(dep)[node.index]
    placement = place(cfg, roles=set(me.roles))
    sfx = f".node{node.index}"
    specs: dict[str, ChildSpec] = {}
    own: dict[str, str] = {}
    if "env-server" in me.roles:
        cfg.env_server.token = plan.get("env_token")
        for i, p in enumerate(plan["env_servers"]):
            ep = envserver.EnvServerPlan(url=p["url"], host=p["host"], port=p["port"], serve_dir=Path(p["serve_dir"]),
                                         write_root=None, sources=p["sources"])
            name = "env-server" if i == 0 else f"env-server-{i}"
            specs[name] = envserver.serve_spec(cfg, ep, run.log_file(f"{name}.console"), name=name)
            specs[name].env.update(placement.env_for("env-server"))
            own[name] = ep.health_url
    reps = {r.index: r for r in all_replicas(dep, node.addrs)}
    for j, r in enumerate(me.replicas):
        rep = reps[r]
        specs[rep.name] = replicas.replica_spec(run, rep, placement.replica_env(j, dep.infer_replicas_per_node))
        own[rep.name] = rep.health_url
    if me.train_rank is not None:
        rz = f"{node.addrs[rendezvous_node(dep)]}:{rendezvous_port(dep)}"
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(dep.num_train_nodes),
                "--nproc-per-node", str(placement.trainer_procs), "--node-rank", str(me.train_rank),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", rz, "--rdzv-id", f"prime-rl-{node.job_id}",
                "--rdzv-conf", f"is_host={1 if me.train_rank == 0 else 0}", "--local-addr", node.addr,
                "--max-restarts", "0", "-m", "prime_rl.cli.trainer", "@", str(run.configs / "trainer.toml")]
        specs["trainer"] = ChildSpec("trainer", argv, run.log_file(f"trainer{sfx}.console"), placement.env_for("trainer"))
    needs: dict[str, str] = {}
    if "orchestrator" in me.roles:
        argv = [sys.executable, "-m", "prime_rl.cli.orchestrator", "@", str(run.configs / "orchestrator.toml")]
        specs["orchestrator"] = ChildSpec("orchestrator", argv, run.log_file("orchestrator.console"),
                                          placement.env_for("orchestrator"))
        needs = {r.name: r.health_url for r in reps.values()}
        needs.update({f"env server {p['url']}": p["url"] + "/health" for p in plan["env_servers"]})
    for spec in specs.values():
        spec.env.setdefault("PRIME_RL_NODE", node.name)
    wanted = [(reps[r].bind_host, reps[r].port, f"inference replica {r} (deployment.port_base)") for r in me.replicas]
    if "env-server" in me.roles:
        wanted += [(p["host"], p["port"], f"env server {p['url']} (deployment.port_base)") for p in plan["env_servers"]]
    if me.train_rank == 0:
        wanted.append((node.addr, rendezvous_port(dep), "torchrun c10d rendezvous (deployment.port_base)"))
    preflight.check_free(wanted)
    return specs, own, needs


def finisher_nodes(dep: DeploymentConfig) -> list[int]:
    """Indices of the nodes that run a trainer or the orchestrator (the job is done when all of them finished)."""
    return [n.index for n in layout(dep) if {"trainer", "orchestrator"} & set(n.roles)]


class RemoteFailure(LaunchError):
    """A process on another node of the job died."""


def _check_remote(jobdir: JobDir, node: SlurmNode) -> None:
    for f in jobdir.failures():
        if f["index"] != node.index:
            raise RemoteFailure(
                f"stopping node {node.index} ({node.name}): {f['process']} on node {f['index']} ({f['name']}) "
                f"{f['what']}; see {f['log']}"
            )


def _wait_servers(urls: dict[str, str], sup: Supervisor, jobdir: JobDir, node: SlurmNode, timeout_s: float) -> None:
    """Poll every health URL until all answer 200, while watching this node's children and the other nodes."""
    t0 = time.monotonic()
    pending = dict(urls)
    while pending:
        for name, url in list(pending.items()):
            if http_ok(url, timeout_s=1.0):
                log.info(f"{name} healthy after {time.monotonic() - t0:.1f} s ({url})")
                del pending[name]
        sup.check(FINISHERS)
        _check_remote(jobdir, node)
        if pending and time.monotonic() - t0 > timeout_s:
            raise LaunchError(
                f"node {node.index} ({node.name}): no 200 within {timeout_s:.0f} s from "
                + ", ".join(f"{n} ({u})" for n, u in pending.items())
                + "; see their nodes' logs in output_dir/logs/ (raise startup_timeout_s if they are only slow)"
            )
        if pending:
            time.sleep(0.5)


def supervise_node(cfg: RLConfig, node: SlurmNode, jobdir: JobDir, specs, own, needs) -> None:
    """Start, wait and supervise this node's children until the job is done (see the module docstring)."""
    finishers_here = FINISHERS & set(specs)
    want = set(finisher_nodes(cfg.deployment))
    with Supervisor(grace_s=cfg.stop_grace_s) as sup:
        for name, spec in specs.items():
            if name != "orchestrator":
                sup.start(spec)
        try:
            _wait_servers(own, sup, jobdir, node, cfg.startup_timeout_s)
            if "orchestrator" in specs:
                _wait_servers({k: v for k, v in needs.items() if k not in own}, sup, jobdir, node, cfg.startup_timeout_s)
                sup.start(specs["orchestrator"])
            marked = False
            done_at = None
            while True:
                sup.check(finishers_here)
                _check_remote(jobdir, node)
                if not marked and finishers_here <= sup.finished:
                    jobdir.mark_finished(node, sorted(finishers_here))
                    marked = True
                if want <= set(jobdir.finished()):
                    log.info(f"node {node.index} ({node.name}): every trainer and orchestrator of the job finished")
                    return
                if marked and done_at is None:
                    done_at = time.monotonic()
                if done_at is not None and time.monotonic() - done_at > cfg.finish_timeout_s:
                    raise LaunchError(f"node {node.index}: the other nodes did not finish within {cfg.finish_timeout_s:.0f} s "
                                      f"(finished: {jobdir.finished()}, expected {sorted(want)})")
                time.sleep(0.5)
        except ChildFailed as e:
            time.sleep(1.0)  # a SIGTERM from scancel reaches children and launcher together: let it win
            code = describe_exit(e.code)
            jobdir.mark_failed(node, e.name, f"died ({code})", str(e.log))
            raise LaunchError(f"{e.name} on node {node.index} ({node.name}) died ({code}). {e}") from None


def run_node(cfg: RLConfig) -> int:
    """The node launcher; returns the exit status (0 done, 1 a process died anywhere, 2 a pre-flight check
    failed, 143 SIGTERM)."""
    if cfg.deployment.type == "single-node":
        from prime_rl.launcher.rl import launch_and_wait

        setup_logging("rl", Path(cfg.orchestrator.output_dir).resolve(), cfg.log.level)
        return launch_and_wait(cfg)
    node = slurm_node()
    run = RunDir(Path(cfg.orchestrator.output_dir).resolve())
    cfg.set_run_dir(run.root)
    setup_logging(f"rl.node{node.index}", run.root, cfg.log.level)
    dep = cfg.deployment
    jobdir = JobDir(run.root, node.job_id)
    t0 = time.monotonic()
    try:
        with handle_signals():
            if node.num_nodes < dep.num_nodes:
                raise PreflightError(
                    f"the allocation has {node.num_nodes} node(s) but deployment.num_infer_nodes "
                    f"({dep.num_infer_nodes}) + deployment.num_train_nodes ({dep.num_train_nodes}) = {dep.num_nodes}; "
                    f"submit with --nodes {dep.num_nodes} (slurm.nodes) or lower them"
                )
            if node.index >= dep.num_nodes:
                log.warning(f"node {node.index} ({node.name}) has no role: the run needs {dep.num_nodes} nodes")
                return 0
            log.info(f"node {node.index} ({node.name}, {node.addr}): {layout(dep)[node.index].describe(dep)}")
            jobdir.arrive(node)
            jobdir.wait_all_arrived(node, dep.rendezvous_timeout_s, run.root)
            if node.index == 0:
                try:
                    plan = prepare_head(cfg, node)
                except LaunchError as e:
                    jobdir.mark_failed(node, "the launcher", f"failed its pre-flight checks: {e}", str(run.logs))
                    raise
                jobdir.write_plan(plan)
            else:
                plan = jobdir.wait_plan(dep.rendezvous_timeout_s + cfg.startup_timeout_s)
                _check_remote(jobdir, node)
            specs, own, needs = node_specs(cfg, node, plan, run)
            supervise_node(cfg, node, jobdir, specs, own, needs)
    except Interrupted as e:
        log.warning(f"node {node.index} ({node.name}): {e.signal_name} received: stopped every process of this node")
        return 128 + e.signum
    except LaunchError as e:
        log.error(str(e))
        return e.exit_code
    log.info(f"node {node.index} ({node.name}) done in {time.monotonic() - t0:.0f} s")
    return 0
