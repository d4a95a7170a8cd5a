"""One launcher per node of a multi-node `rl` run (`python -m prime_rl.cli.rl_node @ configs/rl.toml`, started
by `srun` from the rendered sbatch script, one task per node).

Node layout (`layout`, index = SLURM_PROCID): nodes 0 .. num_infer_nodes-1 run `infer_replicas_per_node`
inference servers each; the next num_train_nodes nodes run the trainer, one torchrun job over all of them with the
rendezvous on the first trainer node, which runs trainer rank 0; the orchestrator runs on
`deployment.orchestrator_node` (default 0) and the env server(s) rl starts on `deployment.env_server_node` (default:
the orchestrator's node). Node k's ports are `port_base + 16k + offset` (config/deployment.py), so roles sharing one
host never collide.

Run directory: `output_dir`, shared by every node; with `deployment.shared_fs = false` node k's own
`output_dir/node_<k>` (its logs, metrics, configs; the trainer's checkpoints on the trainer nodes), the nodes meeting
through node 0's control store (`jobstore.StoreJobDir`) instead of `output_dir/slurm/job_<id>/`, node 0's configs
copied into each node's directory.

A node's life: announce itself in the job directory and wait to see every other node there (the shared-filesystem
check; without one: in the control store); node 0 prepares the run (pre-flight checks, resume/clean, rows, every role's config) and writes the plan;
start this node's processes; the orchestrator node waits for every replica and env server before starting the
orchestrator; then supervise until every trainer and orchestrator of the job finished (exit 0), a process on any
node died (exit 1, naming the node and the process), or Slurm sent SIGTERM (scancel, time limit: exit 143).
Every process this node started is stopped on the way out.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from prime_rl.config import secrets
from prime_rl.config.rl import SECTIONS, RLConfig
from prime_rl.launcher.cluster import JobDir, SlurmNode, slurm_node
from prime_rl.launcher.errors import ChildFailed, LaunchError, PreflightError
from prime_rl.launcher.evolve import evolve
from prime_rl.launcher.jobstore import StoreJobDir, rebase_toml
from prime_rl.launcher.layout import all_replicas, finisher_nodes, layout  # noqa: F401 - the node layout's home
from prime_rl.launcher.placement import place
from prime_rl.launcher.plan import RunPlan, resolve
from prime_rl.launcher.specs import NodeSpecs, node_specs
from prime_rl.launcher.supervisor import Supervisor, exit_status
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.rundir import RunDir
from prime_rl.process import describe_exit, http_ok

log = logging.getLogger("prime_rl.rl")

FINISHERS = {"trainer", "orchestrator"}


def node_layout(cfg: RLConfig, node: SlurmNode):
    """This node's view of the job (`layout.Layout`)."""
    from prime_rl.launcher.layout import Layout

    return Layout.slurm(cfg.deployment.type, node.addrs, node.index, node.job_id)


def prepare_head(cfg: RLConfig, node: SlurmNode) -> RunPlan:
    """Node 0: resolve the job's plan (every pre-flight check) and execute its file-system part (resume/clean,
    rows, every role's config). Returns the plan the other nodes read (`RunPlan`, as JSON in the job directory).

    Raises:
        PreflightError: a check failed."""
    from prime_rl.launcher.rl import execute_head

    plan = resolve(cfg, node_layout(cfg, node))
    execute_head(plan, cfg)
    return plan


class RemoteFailure(LaunchError):
    """A process on another node of the job died."""


def _check_remote(jobdir: JobDir | StoreJobDir, node: SlurmNode) -> None:
    for failure in jobdir.failures():
        if failure["index"] != node.index:
            raise RemoteFailure(
                f"stopping node {node.index} ({node.name}): {failure['process']} on node {failure['index']} "
                f"({failure['name']}) {failure['what']}; see {failure['log']}"
            )


def _wait_servers(urls: dict[str, str], sup: Supervisor, jobdir: JobDir | StoreJobDir, node: SlurmNode, timeout_s: float) -> None:
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


def supervise_node(cfg: RLConfig, node: SlurmNode, jobdir: JobDir | StoreJobDir, built: NodeSpecs) -> None:
    """Start, wait and supervise this node's children until the job is done (see the module docstring)."""
    specs, own, needs = built.specs, built.own, built.needs
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


def own_configs(jobdir: StoreJobDir, plan: RunPlan, run: RunDir) -> RunPlan:
    """Without a shared filesystem: write the configs node 0 shared into this node's `configs/`, node 0's run
    directory replaced by this node's in every path (`jobstore.rebase_toml`); returns the plan pointed at this node's
    run directory. This node's own `rl.toml` (from the job script) is kept."""
    from prime_rl.transport.atomic import atomic_write_text

    run.configs.mkdir(parents=True, exist_ok=True)
    for name, text in jobdir.get_configs().items():
        if name != "rl":
            atomic_write_text(run.configs / f"{name}.toml", rebase_toml(text, plan.run_dir, run.root))
    return plan.model_copy(update={"run_dir": run.root})


def run_node(cfg: RLConfig) -> int:
    """The node launcher; returns the exit status (0 done, 1 a process died anywhere, 2 a pre-flight check
    failed, 143 SIGTERM)."""
    if cfg.deployment.type == "single-node":
        from prime_rl.launcher.rl import launch_and_wait

        setup_logging("rl", Path(cfg.orchestrator.output_dir).resolve(), cfg.log.level)
        return launch_and_wait(cfg)
    node = slurm_node()
    dep = cfg.deployment
    root = dep.node_dir(Path(cfg.orchestrator.output_dir).resolve(), node.index)
    if not dep.shared_fs:  # this node's own run directory: every process of the node writes there, and only there
        cfg = evolve(cfg, {"output_dir": root, **{f"{s}.output_dir": root for s in SECTIONS}})
    run = RunDir(root)
    setup_logging(f"rl.node{node.index}", run.root, cfg.log.level)
    jobdir: JobDir | StoreJobDir = JobDir(run.root, node.job_id)  # the store replaces it in `body` (it may raise)
    t0 = time.monotonic()

    def body() -> None:
        nonlocal jobdir
        if not dep.shared_fs:
            jobdir = StoreJobDir(node, dep.control_port(), dep.rendezvous_timeout_s, dep.bind_host)
        try:
            run_body()
        finally:
            if isinstance(jobdir, StoreJobDir):
                jobdir.leave(node)
                jobdir.close(timeout_s=cfg.finish_timeout_s)

    def run_body() -> None:
        if node.num_nodes < dep.num_nodes:
            raise PreflightError(
                f"the allocation has {node.num_nodes} node(s) but deployment.num_infer_nodes "
                f"({dep.num_infer_nodes}) + deployment.num_train_nodes ({dep.num_train_nodes}) = {dep.num_nodes}; "
                f"submit with --nodes {dep.num_nodes} (slurm.nodes) or lower them"
            )
        if node.index >= dep.num_nodes:
            log.warning(f"node {node.index} ({node.name}) has no role: the run needs {dep.num_nodes} nodes")
            return
        log.info(f"node {node.index} ({node.name}, {node.addr}): {layout(dep)[node.index].describe(dep)}")
        jobdir.arrive(node)
        jobdir.wait_all_arrived(node, dep.rendezvous_timeout_s, run.root)
        if node.index == 0:
            try:
                plan = prepare_head(cfg, node)
            except LaunchError as e:
                jobdir.mark_failed(node, "the launcher", f"failed its pre-flight checks: {e}", str(run.logs))
                raise
            if isinstance(jobdir, StoreJobDir):
                jobdir.put_configs(run.configs)
            plan = plan.model_copy(update={"secrets": secrets.given()})  # configs/ hold them redacted
            jobdir.write_plan(plan.model_dump(mode="json"))
        else:
            data = jobdir.wait_plan(dep.rendezvous_timeout_s + cfg.startup_timeout_s)
            _check_remote(jobdir, node)
            plan = RunPlan.model_validate(data)
            secrets.adopt(plan.secrets)  # this node's processes read node 0's configs, secrets redacted
            if isinstance(jobdir, StoreJobDir):
                plan = own_configs(jobdir, plan, run)
        placement = place(cfg, roles=set(plan.nodes[node.index].roles))
        supervise_node(cfg, node, jobdir, node_specs(cfg, plan, node.index, placement, node.name))

    code = exit_status(body, log, "stopped every process of this node", prefix=f"node {node.index} ({node.name}): ")
    if code == 0:
        log.info(f"node {node.index} ({node.name}) done in {time.monotonic() - t0:.0f} s")
    return code
