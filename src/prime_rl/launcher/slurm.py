"""Slurm submission: `rl` / `sft` with a `[slurm]` section render `output_dir/slurm/{rl,sft}.sbatch` from a packaged
Jinja2 template (or `slurm.template`) and submit it with `sbatch`, printing the job id, where the logs go and how
to follow or cancel the job. `--dry-run` writes the script (and the resolved configs) without submitting.

Inside the job, `srun` starts one launcher per node (`prime_rl.cli.rl_node` / `prime_rl.cli.sft_node`), which
learns its role from Slurm's variables (see `multinode.py`, `cluster.py`). Without a shared filesystem
(`deployment.shared_fs = false`) the `rl` script carries the run config itself (exported to every node as
PRIME_RL_RL_TOML); each node writes it to `output_dir/node_<k>/configs/rl.toml` and starts its launcher on it.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jinja2

from prime_rl.config.deployment import PORT_STRIDE, SlurmConfig
from prime_rl.config.loader import write_config
from prime_rl.config.rl import RLConfig
from prime_rl.config.trainer import SFTConfig
from prime_rl.launcher.errors import LaunchError, PreflightError

log = logging.getLogger("prime_rl.slurm")

TEMPLATES = Path(__file__).parent / "templates"


class SubmitError(LaunchError):
    """`sbatch` is missing or refused the script (the message carries its output)."""


def _env(template: Path | None) -> tuple[jinja2.Environment, str]:
    if template is None:
        loader = jinja2.FileSystemLoader(str(TEMPLATES))
        name = None
    else:
        tpl_path = Path(template).expanduser().resolve()
        if not tpl_path.is_file():
            raise PreflightError(f"slurm.template = {str(template)!r}: no such file")
        loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(tpl_path.parent)),
                                      jinja2.FileSystemLoader(str(TEMPLATES))])
        name = tpl_path.name
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env, name


def _common(slurm: SlurmConfig, output_dir: Path, kind: str, nodes: int, argv: list[str]) -> dict[str, Any]:
    out = Path(output_dir).resolve()
    return {
        "slurm": slurm,
        "nodes": nodes,
        "sbatch_lines": [ln.strip().removeprefix("#SBATCH").strip() for ln in slurm.sbatch_lines],
        "output_dir": out,
        "job_log": out / "slurm" / "job_%j.log",
        "script": out / "slurm" / f"{kind}.sbatch",
        "workdir": Path(slurm.workdir or os.getcwd()).resolve(),
        "python": slurm.python or sys.executable,
        "config": out / "configs" / f"{kind}.toml",
        "command": " ".join([kind, *argv]) if argv else kind,
    }


def render(kind: str, ctx: dict[str, Any], template: Path | None) -> str:
    """The sbatch script for `kind` ("rl" | "sft") from `ctx`.

    Raises:
        PreflightError: `slurm.template` is missing or renders with an undefined variable (names it).
    """
    env, name = _env(template)
    name = name or f"{kind}.sbatch.jinja"
    try:
        return env.get_template(name).render(template_name=name, **ctx)
    except jinja2.UndefinedError as e:
        raise PreflightError(f"slurm.template {name}: {e}") from None


def rl_context(cfg: RLConfig, argv: list[str] | None = None) -> dict[str, Any]:
    """Template variables of an `rl` job: the `[slurm]` settings, the node layout, rendezvous and ports."""
    from prime_rl.launcher.layout import layout, rendezvous_node, rendezvous_port

    dep = cfg.deployment
    ctx = _common(cfg.slurm, cfg.orchestrator.output_dir, "rl", dep.num_nodes, argv or [])
    if dep.type == "multi-node":
        nodes = [{"index": n.index, "text": n.describe(dep)} for n in layout(dep)]
        ctx.update(rdzv_node=rendezvous_node(dep), rdzv_port=rendezvous_port(dep))
    else:
        nodes = [{"index": 0, "text": "everything (single-node run: inference, trainer, orchestrator, env server)"}]
        ctx.update(rdzv_node=0, rdzv_port="(local)")
    ctx.update(layout=nodes, port_base=dep.port_base, stride=PORT_STRIDE,
               node_local=dep.type == "multi-node" and not dep.shared_fs, config_text="")  # fmt: skip
    return ctx


def sft_context(cfg: SFTConfig, argv: list[str] | None = None) -> dict[str, Any]:
    dep = cfg.deployment
    ctx = _common(cfg.slurm, cfg.output_dir, "sft", dep.num_nodes, argv or [])
    ctx.update(procs=sft_procs(cfg), rdzv_node=0, rdzv_port=dep.port_base)
    return ctx


def sft_procs(cfg: SFTConfig) -> int:
    from prime_rl.launcher.placement import visible_gpus

    return cfg.deployment.num_gpus if visible_gpus() else cfg.deployment.cpu_procs


def write_script(text: str, path: Path) -> Path:
    from prime_rl.transport.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    path.chmod(0o755)
    return path


def sbatch(script: Path) -> str:
    """Submit `script`; returns the job id.

    Raises:
        SubmitError: sbatch missing or failing (its message included)."""
    exe = shutil.which("sbatch")
    if exe is None:
        raise SubmitError(
            "sbatch not found: submit from a Slurm login node (or `sbatch` the script yourself: " + str(script) + ")"
        )
    proc = subprocess.run([exe, "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()
        raise SubmitError(f"sbatch {script} failed (exit code {proc.returncode}): {said}")
    return proc.stdout.strip().split(";")[0]


def announce(job_id: str, ctx: dict[str, Any]) -> str:
    """What `rl`/`sft` print after submitting: job id, logs, how to follow and cancel."""
    job_log = str(ctx["job_log"]).replace("%j", job_id)
    return "\n".join([
        f"submitted Slurm job {job_id} ({ctx['nodes']} node(s)): {ctx['script']}",
        f"  job log:      {job_log}",
        f"  process logs: {ctx['output_dir'] / 'logs'}/",
        f"  follow:       squeue -j {job_id}; tail -f {job_log}",
        f"  cancel:       scancel {job_id}   (every process on every node stops cleanly; resume with --resume)",
        f"  result:       sacct -j {job_id} -o JobID,State,ExitCode",
    ])


def submit_rl(cfg: RLConfig, argv: list[str] | None = None) -> int:
    """`rl @ cfg` with `[slurm]`: the launch plan's checks (those that need no node: `plan.resolve` with
    `Layout.submit`), `configs/rl.toml` (what every node reads), the sbatch script, `sbatch` (not with --dry-run,
    which also prints the checks and the plan). Returns the exit status (0 submitted or dry run; 1 sbatch failed;
    2 a check failed)."""
    from prime_rl.config.loader import config_to_toml
    from prime_rl.launcher.dryrun import report
    from prime_rl.launcher.layout import Layout
    from prime_rl.launcher.plan import launch_config, resolve

    try:
        plan = resolve(cfg, Layout.submit(cfg))
        ctx = rl_context(cfg, argv)
        launch = launch_config(cfg)
        if ctx["node_local"]:  # no shared filesystem: the config travels in the script (`_nodes_local` below)
            ctx["config_text"] = config_to_toml(launch)
        text = render("rl", ctx, cfg.slurm.template)
        if ctx["node_local"] and "PRIME_RL_RL_TOML" not in text:
            raise PreflightError(f"slurm.template = {str(cfg.slurm.template)!r} with deployment.shared_fs = false: the "
                                 "script must export the run config (config_text) as PRIME_RL_RL_TOML and have each "
                                 "node write it into output_dir/node_<k>/configs/ (see the packaged rl.sbatch.jinja)")
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if cfg.dry_run:
        print(report(plan))
        return _dry_run_files("rl", launch, ctx, cfg.slurm.template)
    write_config(launch, ctx["config"])
    return _finish(text, ctx, cfg.dry_run)


def submit_sft(cfg: SFTConfig, argv: list[str] | None = None) -> int:
    """`sft @ cfg` with `[slurm]` (see `submit_rl`)."""
    try:
        ctx = sft_context(cfg, argv)
        text = render("sft", ctx, cfg.slurm.template)
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if cfg.dry_run:
        return _dry_run_files("sft", cfg.model_copy(update={"dry_run": False}), ctx, cfg.slurm.template)
    write_config(cfg, ctx["config"])
    return _finish(text, ctx, cfg.dry_run)


def _dry_run_files(kind: str, config: Any, ctx: dict[str, Any], template: Path | None) -> int:
    """A `--dry-run` with `[slurm]`: `configs/<kind>.toml` and the sbatch script, not submitted. When the run
    directory's `configs/<kind>.toml` holds another config (a job of that run may be using it), both go to
    `dry-run/` folders beside them instead (`config.resolved.write_dry_run`), the script reading the new config.
    Returns 0."""
    from prime_rl.config.resolved import DRY_RUN_DIR, dry_run_lines, write_dry_run

    configs_dir = ctx["config"].parent
    done = write_dry_run({kind: config}, configs_dir)
    if done.differ:
        ctx = {**ctx, "config": done.paths[kind], "script": ctx["script"].parent / DRY_RUN_DIR / ctx["script"].name}
    script = write_script(render(kind, ctx, template), ctx["script"])
    print("\n".join(dry_run_lines(done, configs_dir, kind)))
    print(f"sbatch script written to {script} (--dry-run: not submitted; submit with `sbatch {script}`)")
    return 0


def _finish(text: str, ctx: dict[str, Any], dry_run: bool) -> int:
    script = write_script(text, ctx["script"])
    print(f"resolved config written to {ctx['config']}")
    if dry_run:
        print(f"sbatch script written to {script} (--dry-run: not submitted; submit with `sbatch {script}`)")
        return 0
    try:
        job_id = sbatch(script)
    except SubmitError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(announce(job_id, ctx))
    return 0


def run_sft_node(cfg: SFTConfig) -> int:
    """One node of a Slurm `sft` job: shared-filesystem check, then this node's torchrun (c10d rendezvous on
    node 0) under supervision. Returns the exit status (0, 1 a rank died here or elsewhere, 143 SIGTERM)."""
    from prime_rl.launcher.cluster import JobDir, slurm_node
    from prime_rl.launcher.errors import ChildFailed
    from prime_rl.launcher.supervisor import Supervisor, exit_status
    from prime_rl.monitor.logger import setup_logging
    from prime_rl.monitor.rundir import RunDir
    from prime_rl.process import ChildSpec, describe_exit

    node = slurm_node()
    run = RunDir(Path(cfg.output_dir).resolve())
    setup_logging(f"sft.node{node.index}", run.root, cfg.log.level)
    dep = cfg.deployment
    jobdir = JobDir(run.root, node.job_id)
    procs = sft_procs(cfg)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(dep.num_nodes), "--nproc-per-node",
            str(procs), "--node-rank", str(node.index), "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"{node.addrs[0]}:{dep.port_base}", "--rdzv-id", f"prime-rl-sft-{node.job_id}", "--rdzv-conf",
            f"is_host={1 if node.index == 0 else 0}", "--local-addr", node.addr, "--max-restarts", "0",
            "-m", "prime_rl.cli.sft", "@", str(run.configs / "sft.toml")]
    env = {"PRIME_RL_NODE": node.name}

    def body() -> None:
        if node.num_nodes != dep.num_nodes:
            raise PreflightError(f"the allocation has {node.num_nodes} node(s) but deployment.num_nodes = {dep.num_nodes}")
        log.info(f"node {node.index} ({node.name}, {node.addr}): sft torchrun node {node.index} of {dep.num_nodes}, {procs} rank(s)")
        jobdir.arrive(node)
        jobdir.wait_all_arrived(node, 300.0, run.root)
        with Supervisor(grace_s=30.0) as sup:
            sup.start(ChildSpec("sft", argv, run.log_file(f"sft.node{node.index}.console"), env))
            try:
                while True:
                    sup.check({"sft"})
                    if "sft" in sup.finished:
                        break
                    for failure in jobdir.failures():
                        if failure["index"] != node.index:
                            raise LaunchError(f"stopping: {failure['process']} on node {failure['index']} "
                                              f"({failure['name']}) {failure['what']}")
                    time.sleep(0.5)
            except ChildFailed as e:
                time.sleep(1.0)
                jobdir.mark_failed(node, "sft", f"died ({describe_exit(e.code)})", str(e.log))
                raise LaunchError(f"sft on node {node.index} ({node.name}) died ({describe_exit(e.code)}). {e}") from None

    code = exit_status(body, log, "stopped sft on this node", prefix=f"node {node.index} ({node.name}): ")
    if code:
        return code
    log.info(f"node {node.index} ({node.name}): sft finished")
    return 0
