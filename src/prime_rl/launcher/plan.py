"""The launch plan: `plan = resolve(cfg, layout)` runs every pre-flight check of a run and decides everything the
launcher then executes: the processes and the node each runs on, their configs, hosts and ports, the env servers
rl starts, the inference replicas, the step the run starts after. It changes no file and starts no process (it
reads files and probes URLs); `cfg` is not changed: every resolved config is a new object (`evolve`).

A single-node run is the one-node layout of the same code path as a multi-node run, with the same checks; the
checks that need the node itself (ports free, GPUs) run on the node that executes the plan and are listed in
`RunPlan.deferred` when `rl` only submits a Slurm job. `rl --dry-run` prints the checks and the plan and writes
the configs (`write_configs`); `rl` executes the plan (`launcher/rl.py`, `launcher/multinode.py`). Between the nodes
of a Slurm job the plan travels as JSON (`RunPlan.model_dump_json`; the configs stay out of it, the nodes read
them from `configs/`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from prime_rl.config.deployment import MAX_ENV_SERVERS, PORT_ENV_SERVER
from prime_rl.config.rl import SECTIONS, RLConfig
from prime_rl.launcher import envserver, preflight, resume
from prime_rl.launcher.dtype import run_dtypes
from prime_rl.launcher.envserver import EnvServerPlan
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.evolve import evolve
from prime_rl.launcher.layout import Layout, NodeRoles, Replica, local_replicas, node_roles, run_replicas
from prime_rl.launcher.placement import place
from prime_rl.launcher.replicas import admin_token, replica_config
from prime_rl.monitor.rundir import RunDir
from prime_rl.ports import is_local, url_host_port
from prime_rl.process import http_ok

log = logging.getLogger("prime_rl.rl")

T = TypeVar("T")

# every check `resolve` runs, in order (single-node and multi-node alike); the names `RunPlan.checks` lists
CHECKS = (
    "run directory", "sizes", "model", "extensions", "urls", "context", "renderer", "inference client",
    "env servers", "env server identity", "data", "capacity", "ports", "previous run", "placement", "prompt lengths",
)  # fmt: skip
NODE_CHECKS = ("ports", "placement")  # need the node itself: deferred to each node when submitting


class ProcessPlan(BaseModel):
    """One process of the run: its child name, role, the node(s) it runs on, the config file it reads (the env
    server serves a rows directory instead), its health URL and the ports it binds."""

    name: str
    role: Literal["env-server", "inference", "trainer", "orchestrator"]
    nodes: list[int]
    config: Path | None = None
    health_url: str | None = None
    ports: list[int] = Field(default_factory=list)


class RunPlan(BaseModel):
    """Everything decided before a run starts (see the module docstring). `config` is the resolved RL config and
    `configs` the config of each file under `configs/` (name -> config); neither travels between nodes."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    layout: Layout
    nodes: list[NodeRoles]
    run_dir: Path
    start_step: int = 0
    resume: bool = False
    clean: bool = False
    fork: Path | None = None
    env_servers: list[EnvServerPlan] = Field(default_factory=list)
    env_token: str | None = None
    secrets: dict[str, dict[str, str]] = Field(default_factory=dict)  # node 0's configs/ secrets (secrets.SECRETS_ENV)
    replicas: list[Replica] = Field(default_factory=list)
    processes: list[ProcessPlan] = Field(default_factory=list)
    checks: list[str] = Field(default_factory=list)
    deferred: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # what the checks found that a run survives (said at start too)
    trainer_procs: int | None = None
    device: str | None = None
    config: SkipValidation[RLConfig | None] = Field(None, exclude=True)  # resolved: not validated again
    configs: SkipValidation[dict[str, Any]] = Field(default_factory=dict, exclude=True)

    def process(self, name: str) -> ProcessPlan:
        """The process named `name` (KeyError when the plan has none)."""
        for proc in self.processes:
            if proc.name == name:
                return proc
        raise KeyError(name)

    def on_node(self, index: int) -> list[ProcessPlan]:
        """The processes node `index` runs."""
        return [p for p in self.processes if index in p.nodes]

    def describe(self) -> str:
        """The plan for people: one line per process (node, config, ports), then the run directory and start."""
        lines = []
        for proc in self.processes:
            where = f"node {','.join(map(str, proc.nodes))}" if self.layout.multi else "this machine"
            what = f"config {proc.config}" if proc.config is not None else f"serves {self._serve_dir(proc.name)}"
            ports = f", port {','.join(map(str, proc.ports))}" if proc.ports else ""
            health = f", health {proc.health_url}" if proc.health_url else ""
            lines.append(f"  {proc.name:<14} {where}: {what}{ports}{health}")
        start = (f"resume after checkpoint step {self.start_step}" if self.resume else
                 f"fork of checkpoint step {self.start_step} ({self.fork})" if self.fork is not None else "a fresh run")
        if self.clean:
            start += " (--clean: the previous run's artifacts are removed first)"
        head = [f"run directory {self.run_dir} ({self.layout.kind}, {start})"]
        if self.config is not None and not self.config.deployment.shared_fs:
            head.append(f"no shared filesystem: node k keeps its own run directory {self.run_dir}/node_<k> (its "
                        "configs/ and logs/ there, not under the paths below)")
        if self.device is not None:
            head.append(f"placement: {self.device}, trainer {self.trainer_procs} rank(s) per trainer node")
        return "\n".join(head + lines)

    def _serve_dir(self, name: str) -> str:
        server_idx = 0 if name == "env-server" else int(name.rsplit("-", 1)[1])
        server = self.env_servers[server_idx]
        written = f" (rows written first into {server.write_root})" if server.write_root is not None else ""
        return f"{server.serve_dir}" + written


class _Checks:
    """Runs the named checks and records the names of those that ran."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.deferred: list[str] = []

    def run(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        assert name in CHECKS, name
        out = fn(*args, **kwargs)
        self.done.append(name)
        return out


def resolve(cfg: RLConfig, where: Layout | None = None, probe: Callable[[str], bool] = http_ok,
            gpus: list[str] | None = None) -> RunPlan:  # fmt: skip
    """Check the run `cfg` laid out as `where` (default: single-node on this machine) and decide its plan.

    Args:
        probe: `probe(health_url)` -> whether a server answers there (a resources server already running is
            used, not started).
        gpus: the visible GPU ids (default: `placement.visible_gpus()`).

    Raises:
        PreflightError: a check failed (names the field, the file or flag and the fix); nothing was started,
            no file was written.
    """
    where = where or Layout.single()
    checks = _Checks()
    root = checks.run("run directory", preflight.check_run_dirs, cfg)
    cfg = evolve(cfg, {"output_dir": root, **{f"{s}.output_dir": root for s in SECTIONS}})
    run = RunDir(root)
    checks.run("sizes", preflight.check_sizes, cfg)
    checks.run("model", preflight.check_model, cfg)
    checks.run("extensions", preflight.check_extensions, cfg)
    checks.run("urls", preflight.check_urls, cfg)
    checks.run("context", preflight.check_context, cfg)
    checks.run("renderer", preflight.check_renderer, cfg)
    nodes = node_roles(cfg, where)
    replicas = run_replicas(cfg, where) if cfg.orchestrator.backend.type == "server" else []  # custom: its own engine
    urls = checks.run("inference client", preflight.check_client, cfg, replicas, multi=where.multi)
    changes = {"orchestrator.client.base_url": urls, **admin_token(cfg, replicas)}
    if cfg.orchestrator.backend.type != "server":  # a custom backend reads backend.kwargs, not [orchestrator.client]
        changes = {key: value for key, value in changes.items() if not key.startswith("orchestrator.client.")}
    cfg = evolve(cfg, changes)

    remote_only = not where.here  # submitting: local URLs are on the nodes, not on this machine

    def probe_here(url: str) -> bool:
        if remote_only and is_local(url_host_port(url)[0]):
            return not cfg.env_server.auto_start  # the user's own server, started on the node
        return probe(url)

    plans = checks.run("env servers", envserver.plan_env_servers, cfg, probe=probe_here)
    if where.multi:
        cfg, plans = env_servers_on_node(cfg, plans, where)
    cfg, plans = envserver.bind_plans(cfg, plans)
    started = plans + ([] if where.here else [_placeholder(s) for s in _local_sources(cfg)])
    checks.run("env server identity", envserver.check_env_servers, cfg, started)
    checks.run("data", preflight.check_data, cfg, plans)
    checks.run("capacity", preflight.check_capacity, cfg, started)
    if where.multi:
        cfg = evolve(cfg, {**rollout_hosts(cfg, where), **weight_hosts(cfg, where)})
        check_node_local(cfg, plans)
    cfg = evolve(cfg, rollout_token(cfg))
    mine = nodes[where.index]
    if where.here:
        own_plans = plans if "env-server" in mine.roles else []
        checks.run("ports", preflight.check_ports, [r for r in replicas if r.index in mine.replicas], own_plans, cfg,
                   set(mine.roles))  # fmt: skip
    begin = checks.run("previous run", resume.start, cfg, run)
    cfg = evolve(cfg, {**retention(cfg), **begin.changes})
    device = trainer_procs = None
    if where.here:
        placement = checks.run("placement", place, cfg, gpus, roles=set(mine.roles) if where.multi else None)
        updates = dict(placement.updates)
        if where.multi:
            updates["orchestrator.num_train_ranks"] = placement.trainer_procs * cfg.deployment.num_train_nodes
        cfg = evolve(cfg, updates)
        device, trainer_procs = placement.device, placement.trainer_procs
        cfg = evolve(cfg, run_dtypes(cfg, device, where.multi))  # one explicit dtype for trainer and inference
    found = checks.run("prompt lengths", preflight.check_prompt_lengths, cfg)
    checks.deferred = [c for c in NODE_CHECKS if c not in checks.done]
    return RunPlan(
        layout=where, nodes=nodes, run_dir=root, start_step=begin.step, resume=begin.resume, clean=begin.clean,
        fork=begin.fork,
        env_servers=plans, env_token=cfg.env_server.token, replicas=replicas,
        processes=processes(cfg, run, nodes, replicas, plans, where), checks=checks.done, deferred=checks.deferred,
        trainer_procs=trainer_procs, device=device, config=cfg, configs=configs(cfg, run, replicas, where),
        warnings=found,
    )  # fmt: skip


def retention(cfg: RLConfig) -> dict[str, Any]:
    """The orchestrator runs up to `max_async_level + 1` steps ahead of the trainer, so with the same
    `ckpt.keep_last` their newest checkpoints may not share a step and nothing could be resumed: the orchestrator
    keeps that many more checkpoints (they are a small JSON state each). Returns the change (empty when none)."""
    trainer_ckpt, orch_ckpt = cfg.trainer.ckpt, cfg.orchestrator.ckpt
    if trainer_ckpt.keep_last is None or orch_ckpt.keep_last is None:
        return {}
    needed = trainer_ckpt.keep_last + cfg.orchestrator.max_async_level + 1
    return {"orchestrator.ckpt.keep_last": max(orch_ckpt.keep_last, needed)}


def rollout_hosts(cfg: RLConfig, where: Layout) -> dict[str, Any]:
    """Multi-node with `rollout_transport.type = "tcp"`: the orchestrator binds `deployment.bind_host` (default: its
    node's address) on its node's rollout port (`deployment.rollout_port()`, in the node's `port_base` block) and
    every trainer rank connects there through the orchestrator node's address. Returns the change (empty for the
    filesystem transport)."""
    if cfg.orchestrator.rollout_transport.type != "tcp":
        return {}
    dep = cfg.deployment
    addr = where.addrs[dep.orchestrator_index()]
    return {"orchestrator.rollout_transport.host": dep.bind_host or addr, "trainer.rollout_transport.host": addr,
            **{f"{s}.rollout_transport.port": dep.rollout_port() for s in ("orchestrator", "trainer")}}  # fmt: skip


def weight_hosts(cfg: RLConfig, where: Layout) -> dict[str, Any]:
    """Multi-node with `weight_transport.type = "collective"`: trainer rank 0 hosts the weight group's store on the
    first trainer node, bound at `deployment.bind_host` (default: that node's address) on
    `deployment.weight_port()` (in that node's `port_base` block); the orchestrator hands the inference workers that
    node's address in every collective `/update_weights`. Returns the change (empty for the filesystem transport)."""
    if cfg.trainer.weight_transport.type != "collective":
        return {}
    dep = cfg.deployment
    addr = where.addrs[dep.trainer_index()]
    return {"trainer.weight_transport.host": dep.bind_host or addr, "orchestrator.weight_transport.host": addr,
            **{f"{s}.weight_transport.port": dep.weight_port() for s in ("orchestrator", "trainer")}}  # fmt: skip


def check_node_local(cfg: RLConfig, plans: list[EnvServerPlan]) -> None:
    """Without a shared filesystem (`deployment.shared_fs = false`) node 0 writes missing env-server rows on its own
    disk, so the env servers that read them must run there.

    Raises:
        PreflightError: rows to write and `deployment.env_server_node` is not 0."""
    dep = cfg.deployment
    if dep.shared_fs or dep.env_server_index() == 0:
        return
    missing = [str(p.write_root) for p in plans if p.write_root is not None]
    if missing:
        raise PreflightError(
            f"deployment.shared_fs = false: node 0 writes the missing env-server rows ({', '.join(missing)}) on its "
            f"own disk, but deployment.env_server_node = {dep.env_server_index()} would serve them; write them on "
            "that node first (`env-server write`), or leave env_server_node (and orchestrator_node) at 0"
        )


def rollout_token(cfg: RLConfig, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Rollouts over tcp with the orchestrator bound beyond loopback (a multi-node run, or a host such as
    0.0.0.0) and no token configured (`rollout_transport.token`, PRIME_RL_ROLLOUT_TOKEN): one random token for
    the orchestrator and the trainer, so no other client on the network reads the batches. Returns the change
    (empty when nothing needs changing); `cfg` is not changed."""
    from prime_rl.http import is_loopback

    rt = cfg.orchestrator.rollout_transport
    if rt.type != "tcp" or rt.secret(environ) is not None or is_loopback(rt.host):
        return {}
    token = secrets.token_urlsafe(24)
    return {"orchestrator.rollout_transport.token": token, "trainer.rollout_transport.token": token}


def env_servers_on_node(cfg: RLConfig, plans: list[EnvServerPlan], where: Layout) -> tuple[RLConfig, list[EnvServerPlan]]:
    """Multi-node: the env servers rl starts move to the env-server node's address and ports; the sources follow.

    Raises:
        PreflightError: more servers than a node's port block holds."""
    from dataclasses import replace

    dep = cfg.deployment
    if len(plans) > MAX_ENV_SERVERS:
        raise PreflightError(f"a multi-node run starts at most {MAX_ENV_SERVERS} env servers, the sources need {len(plans)}")
    node_idx = dep.env_server_index()
    addr = where.addrs[node_idx]
    host = cfg.env_server.host or dep.bind_host or addr
    moved, out = {}, []
    for i, plan in enumerate(plans):
        port = dep.node_ports(node_idx) + PORT_ENV_SERVER + i
        new = replace(plan, host=host, port=port, url=f"http://{addr}:{port}")
        moved[plan.url] = new.url
        out.append(new)
    return envserver.move_sources(cfg, moved), out


def _local_sources(cfg: RLConfig) -> list[str]:
    return sorted({s.env.taskset.task.resources_url.rstrip("/") for _, s in envserver.nemo_sources(cfg)
                   if is_local(url_host_port(s.env.taskset.task.resources_url)[0])})  # fmt: skip


def _placeholder(url: str) -> EnvServerPlan:
    """A server on a node of a job not started yet (checked there, not from here)."""
    host, port = url_host_port(url)
    return EnvServerPlan(url=url, host=host, port=port, serve_dir=Path(), write_root=None)


def processes(cfg: RLConfig, run: RunDir, nodes: list[NodeRoles], replicas: list[Replica],
              plans: list[EnvServerPlan], where: Layout) -> list[ProcessPlan]:  # fmt: skip
    """The processes of the run, env servers first, then inference replicas, trainer, orchestrator."""
    env_node = next(n.index for n in nodes if "env-server" in n.roles)
    out = [ProcessPlan(name="env-server" if i == 0 else f"env-server-{i}", role="env-server", nodes=[env_node],
                       health_url=p.health_url, ports=[p.port]) for i, p in enumerate(plans)]  # fmt: skip
    node_of = {r: n.index for n in nodes for r in n.replicas}
    out += [ProcessPlan(name=r.name, role="inference", nodes=[node_of[r.index]], config=run.configs / f"{r.name}.toml",
                        health_url=r.health_url, ports=[r.port]) for r in replicas]  # fmt: skip
    if cfg.teacher is not None:  # single-node only (config.teacher.check_teacher)
        out.append(ProcessPlan(name="teacher", role="inference", nodes=[0], config=run.configs / "teacher.toml",
                               health_url=cfg.teacher.url + "/health", ports=[cfg.teacher.server.port]))  # fmt: skip
    wt = cfg.trainer.weight_transport
    out.append(ProcessPlan(name="trainer", role="trainer", nodes=[n.index for n in nodes if n.train_rank is not None],
                           config=run.configs / "trainer.toml",
                           ports=[wt.port] if wt.type == "collective" else []))  # fmt: skip
    orch = next(n.index for n in nodes if "orchestrator" in n.roles)
    rt = cfg.orchestrator.rollout_transport
    out.append(ProcessPlan(name="orchestrator", role="orchestrator", nodes=[orch], config=run.configs / "orchestrator.toml",
                           ports=[rt.port] if rt.type == "tcp" else []))  # fmt: skip
    return out


def launch_config(cfg: RLConfig) -> RLConfig:
    """The `rl.toml` a run reads back (a Slurm job's nodes, `rl @ configs/rl.toml`): the run's config with its
    run directory and `ckpt.resume_dir` absolute, without `dry_run`, and (single-node) the orchestrator pointed at
    the replicas the node starts, since the written file sets `base_url` explicitly."""
    root = preflight.check_run_dirs(cfg)
    changes: dict[str, Any] = {"output_dir": root, "dry_run": False, **{f"{s}.output_dir": root for s in SECTIONS},
                               **resume.absolute_resume_dir(cfg)}  # fmt: skip
    if cfg.deployment.type == "single-node" and cfg.orchestrator.backend.type == "server":
        changes["orchestrator.client.base_url"] = preflight.check_client(cfg, local_replicas(cfg))
    return evolve(cfg, changes)


def configs(cfg: RLConfig, run: RunDir, replicas: list[Replica], where: Layout) -> dict[str, Any]:
    """The config of every file under `configs/` (name -> config). The launcher forwards every process's metrics
    to one W&B run, so trainer and orchestrator log none themselves. Single-node: also `rl.toml`, the resolved run
    config (shared top-level fields left to the sections, which hold them resolved). A Slurm job's nodes read
    the `rl.toml` written at submission (`launch_config`)."""
    out: dict[str, Any] = {}
    if not where.multi:
        out["rl"] = evolve(cfg, {"dry_run": False, "model": None, "max_steps": None, "seq_len": None, "ckpt": None})
    out["trainer"] = evolve(cfg.trainer, {"wandb": None})
    out["orchestrator"] = evolve(cfg.orchestrator, {"wandb": None})
    for rep in replicas:
        out[rep.name] = replica_config(cfg, run, rep, multi=where.multi)
    if cfg.teacher is not None:
        out["teacher"] = cfg.teacher.inference_config(run.root)
    return out


def write_configs(plan: RunPlan, names: list[str] | None = None) -> dict[str, Path]:
    """Write `configs/<name>.toml` for each of the plan's configs (or only `names`); return name -> path."""
    from prime_rl.config.loader import write_config

    configs_dir = RunDir(plan.run_dir).configs
    return {name: write_config(c, configs_dir / f"{name}.toml") for name, c in plan.configs.items()
            if names is None or name in names}  # fmt: skip
