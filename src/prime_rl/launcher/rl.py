"""`rl @ config.toml`: start env server(s), inference, trainer and orchestrator in one run directory, stream the
orchestrator's step lines with a progress bar, and stop everything cleanly however the run ends.

Order: pre-flight checks (nothing started yet) -> resume / clean -> device placement -> rows written if missing
-> resolved configs to `configs/` -> start env server(s), inference and trainer -> wait for `/health` of each
server -> start the orchestrator -> supervise until trainer and orchestrator both exit 0 (done at max_steps),
a child dies (exit 1, naming it and its log's last lines), a check fails (exit 2) or SIGINT/SIGTERM
(exit 130/143). Children are stopped orchestrator, trainer, inference, env-server; none survives.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from prime_rl.config.rl import RLConfig
from prime_rl.launcher import envserver, preflight, replicas, resume
from prime_rl.launcher.console import StepView
from prime_rl.launcher.errors import Interrupted, LaunchError, PreflightError
from prime_rl.launcher.health import wait_healthy
from prime_rl.launcher.placement import Placement, place
from prime_rl.launcher.supervisor import Supervisor, handle_signals
from prime_rl.monitor.logger import setup_logging
from prime_rl.monitor.rundir import RunDir
from prime_rl.ports import free_port
from prime_rl.process import ChildSpec

log = logging.getLogger("prime_rl.rl")

FINISHERS = {"trainer", "orchestrator"}


@dataclass
class Launch:
    """Everything decided before starting: the specs to run, servers to wait for, the step to start from."""

    run: RunDir
    specs: dict[str, ChildSpec]
    health: dict[str, str]  # child name -> health URL
    start_step: int = 0
    env_plans: list[envserver.EnvServerPlan] = field(default_factory=list)


def module_argv(module: str, config: Path) -> list[str]:
    return [sys.executable, "-m", module, "@", str(config)]


def build_specs(cfg: RLConfig, run: RunDir, placement: Placement, plans: list[envserver.EnvServerPlan]) -> Launch:
    """The child commands of a run (configs must already be written to `run.configs`)."""
    specs: dict[str, ChildSpec] = {}
    health: dict[str, str] = {}
    for i, plan in enumerate(plans):
        name = "env-server" if i == 0 else f"env-server-{i}"
        specs[name] = envserver.serve_spec(cfg, plan, run.log_file(f"{name}.console"), name=name)
        specs[name].env.update(placement.env_for("env-server"))
        health[name] = plan.health_url
    for rep in replicas.local_replicas(cfg):
        specs[rep.name] = replicas.replica_spec(
            run, rep, placement.replica_env(rep.index, cfg.deployment.infer_replicas_per_node)
        )
        health[rep.name] = rep.health_url
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(placement.trainer_procs),
                "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    specs["trainer"] = ChildSpec(
        "trainer", torchrun + module_argv("prime_rl.cli.trainer", run.configs / "trainer.toml")[1:],
        run.log_file("trainer.console"), placement.env_for("trainer"),
    )
    specs["orchestrator"] = ChildSpec(
        "orchestrator", module_argv("prime_rl.cli.orchestrator", run.configs / "orchestrator.toml"),
        run.log_file("orchestrator.console"), placement.env_for("orchestrator"),
    )
    return Launch(run=run, specs=specs, health=health, env_plans=plans)


def align_checkpoint_retention(cfg: RLConfig) -> None:
    """The orchestrator runs up to `max_async_level + 1` steps ahead of the trainer, so with the same
    `ckpt.keep_last` their newest checkpoints may not share a step and nothing could be resumed. Keep that many
    more orchestrator checkpoints (they are a small JSON state each)."""
    t, o = cfg.trainer.ckpt, cfg.orchestrator.ckpt
    if t.keep_last is not None and o.keep_last is not None:
        o.keep_last = max(o.keep_last, t.keep_last + cfg.orchestrator.max_async_level + 1)


def resume_or_clean(cfg: RLConfig, run: RunDir) -> int:
    """`--resume`: the newest complete checkpoint (later step folders removed, both sections told to resume);
    `--clean`: a previous run's artifacts removed. Returns the step the run starts after (0 when fresh).

    Raises:
        PreflightError: no checkpoint to resume, or a previous run is there and neither flag was given.
    """
    align_checkpoint_retention(cfg)
    if cfg.resume:
        start_step = resume.latest_checkpoint(run)
        gone = resume.drop_steps_after(run, start_step)
        cfg.trainer.ckpt.resume_step = start_step
        cfg.orchestrator.ckpt.resume_step = start_step
        log.info(f"resuming from checkpoint step {start_step}" + (f" (removed {len(gone)} later step folders)" if gone else ""))
        return start_step
    leftovers = resume.previous_run(run)
    if leftovers and cfg.clean:
        resume.clean(run)
        log.info(f"--clean: removed the previous run's artifacts in {run.root}")
    elif leftovers:
        raise PreflightError(
            f"output_dir {run.root} already holds a run ({leftovers[0]}); pass --resume to continue it, "
            f"--clean to start over there, or choose another output_dir"
        )
    return 0


def prepare(cfg: RLConfig) -> Launch:
    """Pre-flight checks, resume/clean, placement, rows and resolved configs. Starts no long-lived process.

    Raises:
        PreflightError: a check failed; nothing was started.
    """
    from prime_rl.cli.rl import write_resolved

    run = RunDir(preflight.check_run_dirs(cfg))
    cfg.set_run_dir(run.root)
    preflight.check_sizes(cfg)
    preflight.check_model(cfg)
    preflight.check_extensions(cfg)
    preflight.check_client(cfg)
    plans = envserver.plan_env_servers(cfg)
    envserver.bind_plans(cfg, plans)
    preflight.check_data(cfg, plans)
    preflight.check_capacity(cfg, plans)
    preflight.check_ports(cfg, plans)

    start_step = resume_or_clean(cfg, run)
    placement = place(cfg)
    log.info(
        f"placement: {placement.device}, trainer {placement.trainer_procs} rank(s)"
        + (f", {cfg.trainer.threads} thread(s) each" if placement.device == "cpu" else "")
    )
    for plan in plans:
        if plan.write_root is not None:
            log.info(f"rows missing: writing them with `env-server write {cfg.env_server.env} {plan.write_root}`")
            envserver.write_rows(cfg, plan, run.log_file("env-server-write"), cfg.startup_timeout_s)
    preflight.check_context(cfg)
    preflight.check_prompt_lengths(cfg)
    write_resolved(cfg)
    replicas.write_replica_configs(cfg, run, replicas.local_replicas(cfg))
    launch = build_specs(cfg, run, placement, plans)
    launch.start_step = start_step
    return launch


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
    wait timed out, 2 when a pre-flight check failed, 130/143 on SIGINT/SIGTERM."""
    root = Path(cfg.orchestrator.output_dir).resolve()
    setup_logging("rl", root, cfg.log.level)
    raise SystemExit(launch_and_wait(cfg))


def launch_and_wait(cfg: RLConfig, prepare_fn=prepare) -> int:
    """`run` without the SystemExit: returns the exit status. `prepare_fn(cfg) -> Launch` can be replaced
    (tests supervise fake children through the same path)."""
    t0 = time.monotonic()
    wandb = None
    code = 1  # until the run finishes: an unexpected error marks the W&B run failed
    try:
        with handle_signals():
            launch = prepare_fn(cfg)
            log.info(f"run directory {launch.run.root}; logs in {launch.run.logs}")
            if cfg.wandb is not None:  # one W&B run for the whole run, fed from metrics.jsonl (monitor.wandb_log)
                from prime_rl.monitor.wandb_log import WandbForwarder, WandbStartError

                try:
                    wandb = WandbForwarder(cfg.wandb, launch.run.root, job_type="rl").start_thread()
                except WandbStartError as e:
                    raise PreflightError(str(e)) from None
            supervise(cfg, launch, console_view=True)
            code = 0
    except Interrupted as e:
        log.warning(f"{e.signal_name} received: stopped every process of the run")
        code = 128 + e.signum
    except LaunchError as e:
        log.error(str(e))
        code = e.exit_code
    finally:
        if wandb is not None:
            wandb.close(exit_code=code)
        if code != 2:  # the run got past its checks: plot what it wrote, finished or not
            from prime_rl.monitor.plots import plot_at_end

            plot_at_end(Path(cfg.orchestrator.output_dir), log)
    if code == 0:
        log.info(f"run finished in {time.monotonic() - t0:.0f} s; results in {launch.run.root}")
    return code
