"""`env-server write` (a built-in environment's rows and NeMo Gym config) and `env-server serve` (them over HTTP).

The configs are `prime_rl.config.env_server`; the command table is `prime_rl.cli.env_server`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from prime_rl.config.env_server import EnvServerServeConfig, EnvServerWriteConfig, is_url


def write(cfg: EnvServerWriteConfig) -> None:
    """Write OUT/resources_servers/<env>_v1/ for a built-in environment, or from an OpenEnv server's URL.

    Raises:
        KeyError: unknown environment. ValueError: the URL is not an `env-server openenv` server's root.
        ConnectionError: nothing answers at the URL.
    """
    if is_url(cfg.env):
        from prime_rl.envs.openenv.writer import write_from_openenv

        root = write_from_openenv(cfg.env, cfg.out)
    else:
        from prime_rl.envs.nemo_gym.rows import write_server

        root = write_server(cfg.env, cfg.out, cfg.env_args())
    files = sorted(root.glob("data/*.jsonl"), key=lambda p: ({"train": 0, "eval": 1}.get(p.stem, 2), p.stem))
    counts = ", ".join(f"{sum(1 for _ in open(p))} {p.stem} rows" for p in files)
    print(f"wrote {root} ({counts}); serve it with `env-server serve {root}`")


def serve(cfg: EnvServerServeConfig) -> None:
    """Serve a written resources server directory until interrupted.

    Raises:
        FileNotFoundError: no server.json in `cfg.dir`. ValueError: a malformed one. PortInUseError: the port is
            taken (checked before anything is imported or loaded; names its holder).
    """
    from prime_rl.ports import check_port_free

    check_port_free(cfg.host, cfg.port, field="port")
    import uvicorn

    from prime_rl.envs.base import load_env, refuse_user_turns
    from prime_rl.envs.nemo_gym.rows import load_server_config
    from prime_rl.envs.nemo_gym.server import ServerState, create_app
    root, server_cfg = load_server_config(cfg.dir)
    env = load_env(server_cfg["env"], **server_cfg.get("env_args", {}))
    refuse_user_turns(env, "the NeMo Gym resources-server protocol")
    state = ServerState(env=env, name=root.name, masked_as_error=cfg.masked_as_error,
                        idle_timeout_s=cfg.idle_timeout_s, max_concurrent=cfg.max_concurrent,
                        at_capacity=cfg.at_capacity, seed_wait_s=cfg.seed_wait_s, token=cfg.token)  # fmt: skip
    if cfg.token is None and cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {cfg.host} without --token: anyone who reaches the port can seed, play and verify "
              "sessions; pass --token (clients send it as a bearer token)", file=sys.stderr)  # fmt: skip
    print(f"serving {server_cfg['env']} from {root} on http://{cfg.host}:{cfg.port} "
          f"(max_concurrent {cfg.max_concurrent}, at capacity: {cfg.at_capacity}, idle_timeout_s {cfg.idle_timeout_s})",
          flush=True)  # fmt: skip
    uvicorn.run(create_app(state), host=cfg.host, port=cfg.port, log_level=cfg.log_level, access_log=False,
                timeout_keep_alive=30)  # fmt: skip


def serve_nemo_gym_entrypoint(server_dir: Path) -> int:
    """Serve `server_dir` the way NeMo Gym starts a resources server's `app.py`: its merged config (YAML) in
    $NEMO_GYM_CONFIG_DICT, this server's top-level key in $NEMO_GYM_CONFIG_PATH; host and port from
    `<key>.resources_servers.<name>`. Returns the exit status (1 with a message when the variables are missing, 2
    when the port is taken)."""
    import os

    import yaml

    raw, key = os.environ.get("NEMO_GYM_CONFIG_DICT"), os.environ.get("NEMO_GYM_CONFIG_PATH")
    if not raw or not key:
        print("error: NEMO_GYM_CONFIG_DICT / NEMO_GYM_CONFIG_PATH are not set (NeMo Gym sets them when it starts "
              f"this server); to serve it yourself run `env-server serve {server_dir}`", file=sys.stderr)  # fmt: skip
        return 1
    try:
        (inner,) = yaml.safe_load(raw)[key]["resources_servers"].values()
        host, port = str(inner["host"]), int(inner["port"])
    except (KeyError, TypeError, ValueError) as e:
        print(f"error: $NEMO_GYM_CONFIG_DICT has no host/port for {key}.resources_servers.<name> ({e!r})", file=sys.stderr)
        return 1
    from prime_rl.ports import PortInUseError

    try:
        serve(EnvServerServeConfig(dir=server_dir, host=host, port=port))
    except PortInUseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        return int(e.code or 0)
    return 0
