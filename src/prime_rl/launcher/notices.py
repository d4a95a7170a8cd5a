"""What `rl` says on its own console before it starts anything (and `rl --dry-run` after the plan): the address
of each Prometheus metrics endpoint the run serves, and settings that take no effect in this run (a `ckpt.skip_*`
flag with nothing to resume; a gate or curriculum setting whose switch is off; `[env_server]` with no source that
uses the server). The trainer and orchestrator say
the same in their logs once they run; these lines put them where the operator looks first."""

from __future__ import annotations

from typing import Any

ROLES = ("trainer", "orchestrator")


def metrics_urls(cfg: Any) -> list[str]:
    """One line per `metrics_server` set in the resolved `rl` config `cfg`: `ROLE metrics: http://HOST:PORT/metrics`
    (port 0: the port is chosen at start and logged in `logs/ROLE.log`)."""
    lines = []
    for role in ROLES:
        server = getattr(cfg, role).metrics_server
        if server is None:
            continue
        host = f"[{server.host}]" if ":" in server.host else server.host
        if server.port:
            lines.append(f"{role} metrics: http://{host}:{server.port}/metrics")
        else:
            lines.append(f"{role} metrics: http://{host}:<port>/metrics, a free port chosen at start "
                         f"({role}.metrics_server.port = 0): its log (logs/{role}.log) names it")  # fmt: skip
    return lines


def unused_skips(cfg: Any) -> list[str]:
    """A warning for the `ckpt.skip_*` flags of `cfg` (the resolved `rl` config) when the run resumes nothing:
    each flag named as set (`fields.as_set`: where it was set), with the fix. Empty when the run resumes."""
    from prime_rl.launcher.fields import as_set

    if any(getattr(cfg, role).ckpt.resuming for role in ROLES):
        return []
    named: dict[str, str] = {}
    for role in ROLES:
        for flag in getattr(cfg, role).ckpt.skips:
            name, where = as_set(cfg, f"{role}.ckpt.{flag}")
            named.setdefault(name, f"{name}{where}")
    if not named:
        return []
    return [f"{', '.join(named.values())} set, but this run resumes nothing (no --resume, ckpt.resume_step or "
            "ckpt.resume_dir), so nothing is skipped; remove the flag, or name the checkpoint to resume"]  # fmt: skip


def inert_recipes(cfg: Any) -> list[str]:
    """A warning per orchestrator recipe setting of `cfg` (the resolved `rl` config) that takes no effect because
    its switch is set off (`config.recipes.inert_recipe_settings`: a gate factor without a rejection criterion,
    difficulty-pool fields with `sampler = "uniform"`), each field named as set, with the fix."""
    from prime_rl.config.recipes import inert_recipe_settings
    from prime_rl.launcher.fields import as_set

    out = []
    for fields, message in inert_recipe_settings(cfg.orchestrator, lambda f: as_set(cfg, f"orchestrator.{f}")[1]):
        named = [f"{name}{where}" for name, where in (as_set(cfg, f"orchestrator.{f}") for f in fields)]
        out.append(f"{', '.join(named)}: {message}")
    return out


def unused_env_server(cfg: Any) -> list[str]:
    """A warning for `[env_server]` settings of `cfg` (the resolved `rl` config) when no train or eval source plays
    NeMo Gym rows (`env.taskset.id = "nemo-gym"`): rl starts a resources server only for such a source, so they do
    nothing. Each field named with where it was set (`fields.as_set`); a field that a resolved config
    (`configs/rl.toml`, which holds the whole section) gives at its default is left out. Empty when a source uses
    the server or nothing under `[env_server]` was set."""
    from prime_rl.config.rl import EnvServerLaunchConfig
    from prime_rl.launcher.envserver import nemo_sources
    from prime_rl.launcher.fields import as_set

    if nemo_sources(cfg):
        return []
    es, default = cfg.env_server, EnvServerLaunchConfig()
    where = {name: as_set(cfg, f"env_server.{name}")[1] for name in EnvServerLaunchConfig.model_fields}
    dumped = {w for name, w in where.items() if getattr(default, name) is not None} == {where["env"]} != {""}
    named = [f"env_server.{name}{where[name]}" for name in EnvServerLaunchConfig.model_fields
             if getattr(es, name) != getattr(default, name) or where[name] and not dumped]  # fmt: skip
    if not named:
        return []
    return [f"{', '.join(named)} set, but no train or eval source plays NeMo Gym rows (env.taskset.id = "
            "\"nemo-gym\"), so rl starts no resources server and [env_server] does nothing; remove it, or add a "
            "source that plays the rows the server would serve"]  # fmt: skip


def warnings(cfg: Any) -> list[str]:
    """Every warning `rl` prints before it starts anything (and `rl --dry-run` under the plan): `unused_skips`,
    `inert_recipes`, `unused_env_server`."""
    return unused_skips(cfg) + inert_recipes(cfg) + unused_env_server(cfg)
