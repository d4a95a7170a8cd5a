"""`rl @ config.toml`: start env server(s), inference, trainer and orchestrator in one run directory, stream the
orchestrator's step lines with a progress bar, and stop everything cleanly however the run ends.

Order: the launch plan (`plan.resolve`: every pre-flight check, nothing started yet) -> the plan executed: resume /
clean, rows written if missing, resolved configs to `configs/` -> start env server(s), inference and trainer ->
wait for `/health` of each server -> start the orchestrator -> supervise until trainer and orchestrator both exit
0 (done at max_steps), a child dies (exit 1, naming it and its log's last lines), a check fails (exit 2) or
SIGINT/SIGTERM (exit 130/143). Children are stopped orchestrator, trainer, inference, env-server; none survives.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from prime_rl.config.rl import RLConfig
from prime_rl.launcher import envserver, notices, preflight, resume
from prime_rl.launcher.console import StepView
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.health import wait_healthy
from prime_rl.launcher.layout import Layout
from prime_rl.launcher.placement import Placement
from prime_rl.launcher.plan import RunPlan, resolve, write_configs
from prime_rl.launcher.specs import node_specs
from prime_rl.launcher.supervisor import Supervisor, exit_status
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.rundir import RunDir
from prime_rl.process import ChildSpec

log = logging.getLogger("prime_rl.rl")

FINISHERS = {"trainer", "orchestrator"}


@dataclass
class Launch:
    """What a single-node run starts: the specs to run, servers to wait for, the step to start from."""

    run: RunDir
    specs: dict[str, ChildSpec]
    health: dict[str, str]  # child name -> health URL
    start_step: int = 0  # the orchestrator's first step is the next one
    env_plans: list[envserver.EnvServerPlan] = field(default_factory=list)


def execute_head(plan: RunPlan, cfg: RLConfig) -> None:
    """The file-system part of a plan, run once per run (single-node: the launcher; multi-node: node 0): remove
    checkpoint steps after the resumed one, or a previous run's artifacts on `--clean`; write missing rows (then
    check their prompt lengths, which the plan could not); write the resolved configs.

    Raises:
        PreflightError: writing the rows failed, or their prompts do not fit `seq_len`."""
    run = RunDir(plan.run_dir)
    if plan.resume:
        gone = resume.drop_steps_after(run, plan.start_step)
        log.info(f"resuming from checkpoint step {plan.start_step}"
                 + (f" (removed {len(gone)} later step folders)" if gone else ""))  # fmt: skip
    elif plan.clean:
        resume.clean(run)
        log.info(f"--clean: removed the previous run's artifacts in {run.root}")
    written = [p for p in plan.env_servers if p.write_root is not None]
    for server in written:
        log.info(f"rows missing: writing them with `env-server write {' '.join(envserver.write_args(cfg, server))}`")
        envserver.write_rows(cfg, server, run.log_file("env-server-write"), cfg.startup_timeout_s)
    if written:
        preflight.check_prompt_lengths(plan.config)
    write_configs(plan)


def prepare(cfg: RLConfig) -> Launch:
    """Resolve the single-node plan of `cfg`, say on the console what the operator needs from it (the metrics
    endpoints' URLs, skip flags with nothing to resume: `notices`) and execute its file-system part; returns what
    to start.

    Raises:
        PreflightError: a check failed; nothing was started.
    """
    from prime_rl.launcher.placement import place

    plan = resolve(cfg, Layout.single())
    log.info(
        f"placement: {plan.device}, trainer {plan.trainer_procs} rank(s)"
        + (f", {plan.config.trainer.threads} thread(s) each" if plan.device == "cpu" else "")
    )
    for line in notices.metrics_urls(plan.config):
        log.info(line)
    for warning in [*plan.warnings, *notices.warnings(plan.config)]:
        log.warning(warning)
    execute_head(plan, cfg)
    placement: Placement = place(plan.config)
    built = node_specs(plan.config, plan, 0, placement)
    first = 0 if plan.config.orchestrator.ckpt.skip_progress else plan.start_step  # skip_progress counts from 1
    return Launch(run=RunDir(plan.run_dir), specs=built.specs, health=built.own, start_step=first,
                  env_plans=plan.env_servers)  # fmt: skip


def supervise(cfg: RLConfig, launch: Launch, console_view: bool = True) -> None:
    """Start the children of `launch`, wait for health, stream steps, and return when trainer and orchestrator
    both exited 0. Every child is stopped on the way out, whatever happens.

    Raises:
        ChildFailed, LaunchError, Interrupted.
    """
    specs = launch.specs
    with Supervisor(grace_s=cfg.stop_grace_s) as sup:
        replica_names = {n for n in specs if n == "inference" or n.startswith("inference-")}
        if len(replica_names) > 1:
            sup.expendable = replica_names
        servers = [n for n in specs if n not in FINISHERS]
        for name in servers:
            sup.start(specs[name])
        if "trainer" in specs:
            sup.start(specs["trainer"])
        for name in servers:
            if name in launch.health:
                waited = wait_healthy(launch.health[name], sup.children[name], cfg.startup_timeout_s, name)
                log.info(f"{name} healthy after {waited:.1f} s ({launch.health[name]})")
                sup.check(FINISHERS)
        view = StepView(specs["orchestrator"].log, cfg.max_steps or cfg.orchestrator.max_steps, launch.start_step)
        sup.start(specs["orchestrator"])
        if console_view:
            with view:
                sup.wait_done(FINISHERS, on_tick=view.poll, finish_timeout_s=cfg.finish_timeout_s)
        else:
            sup.wait_done(FINISHERS, on_tick=view.poll, finish_timeout_s=cfg.finish_timeout_s)


def run(cfg: RLConfig) -> None:
    """Entry point of `rl` (after config parsing). Exits 0 when the run finished, 1 when a child failed or a
    wait timed out, 2 when a pre-flight check failed, 28 when a child (or `rl`) stopped on a full disk
    (prime_rl.diskfull), 130/143 on SIGINT/SIGTERM."""
    root = Path(cfg.orchestrator.output_dir).resolve()
    setup_logging("rl", root, cfg.log.level)
    raise SystemExit(launch_and_wait(cfg))


def launch_and_wait(cfg: RLConfig, prepare_fn=prepare) -> int:
    """`run` without the SystemExit: returns the exit status. `prepare_fn(cfg) -> Launch` can be replaced
    (tests supervise fake children through the same path)."""
    t0 = time.monotonic()
    wandb = None
    launch = None
    code = 1  # until the run finishes: an unexpected error marks the W&B run failed

    def body() -> None:
        nonlocal launch, wandb
        launch = prepare_fn(cfg)
        log.info(f"run directory {launch.run.root}; logs in {launch.run.logs}")
        if cfg.wandb is not None:  # one W&B run for the whole run, fed from metrics.jsonl (monitor.wandb_log)
            from prime_rl.monitor.wandb_log import WandbForwarder, WandbStartError

            try:
                wandb = WandbForwarder(cfg.wandb, launch.run.root, job_type="rl").start_thread()
            except WandbStartError as e:
                raise PreflightError(str(e)) from None
        supervise(cfg, launch, console_view=True)

    try:
        code = exit_status(body, log)
    finally:
        if wandb is not None:
            wandb.close(exit_code=code)
        if code != 2:  # the run got past its checks: plot what it wrote, finished or not
            from prime_rl.monitor.plots import plot_at_end

            plot_at_end(Path(cfg.orchestrator.output_dir), log)
    if code == 0:
        log.info(f"run finished in {time.monotonic() - t0:.0f} s; results in {launch.run.root}")
    return code
