"""`env-server` subcommands: `write` a built-in environment's rows and config, `serve` them over HTTP.

Only argparse is imported at module level, so `--help` is instant (no FastAPI, torch or vLLM).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _write(args: argparse.Namespace) -> int:
    from prime_rl.envs.nemo_gym.rows import write_server

    env_args = {}
    if (args.data_dir is not None or args.synthetic) and args.env != "gridsim":
        raise ValueError(f"--data-dir and --synthetic apply to gridsim only, not {args.env!r}")
    if args.data_dir is not None:
        env_args["data_dir"] = str(args.data_dir.expanduser().resolve())
    if args.synthetic:
        env_args["synthetic"] = True
    root = write_server(args.env, args.out, env_args)
    n = {s: sum(1 for _ in open(root / "data" / f"{s}.jsonl")) for s in ("train", "eval")}
    print(f"wrote {root} ({n['train']} train rows, {n['eval']} eval rows); serve it with `env-server serve {root}`")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from prime_rl.envs.base import load_env
    from prime_rl.envs.nemo_gym.rows import load_server_config
    from prime_rl.envs.nemo_gym.server import ServerState, create_app
    from prime_rl.ports import PortInUseError, check_port_free

    try:  # before loading data: a taken port fails at once, naming its holder
        check_port_free(args.host, args.port, field="port")
    except PortInUseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    root, cfg = load_server_config(args.dir)
    env = load_env(cfg["env"], **cfg.get("env_args", {}))
    state = ServerState(env=env, name=root.name, masked_as_error=args.masked_as_error,
                        idle_timeout_s=args.idle_timeout, max_concurrent=args.max_concurrent,
                        at_capacity=args.at_capacity, seed_wait_s=args.seed_wait, token=args.token)  # fmt: skip
    print(f"serving {cfg['env']} from {root} on http://{args.host}:{args.port} "
          f"(max_concurrent {args.max_concurrent}, at capacity: {args.at_capacity}, idle_timeout {args.idle_timeout})",
          flush=True)  # fmt: skip
    uvicorn.run(create_app(state), host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                timeout_keep_alive=30)  # fmt: skip
    return 0


def serve_nemo_gym_entrypoint(server_dir: Path) -> int:
    """Serve `server_dir` the way NeMo Gym starts a resources server's `app.py`: its merged config (YAML) in
    $NEMO_GYM_CONFIG_DICT, this server's top-level key in $NEMO_GYM_CONFIG_PATH; host and port from
    `<key>.resources_servers.<name>`. Returns the exit status (1 with a message when the variables are missing)."""
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
    argv = ["serve", str(server_dir), "--host", host, "--port", str(port)]
    return _serve(build_parser().parse_args(argv))


def _positive(x: str) -> float:
    v = float(x)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {x}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="env-server", description="NeMo Gym resources server for built-in environments.")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser(
        "write", help="write OUT/resources_servers/<env>_v1/ (config, data/train.jsonl, data/eval.jsonl)"
    )
    w.add_argument("env", help="built-in environment: gridsim, reverse-text")
    w.add_argument("out", type=Path, help="output root")
    data = w.add_mutually_exclusive_group()
    data.add_argument(
        "--data-dir", type=Path, default=None, help="gridsim: folder of ERCOT xlsx files (default: packaged 2021-2024)"
    )
    data.add_argument("--synthetic", action="store_true", help="gridsim: seeded synthetic days instead of real ones")
    w.set_defaults(fn=_write)
    s = sub.add_parser("serve", help="serve a written resources server directory over HTTP")
    s.add_argument("dir", type=Path, help="OUT/resources_servers/<env>_v1 (or OUT holding exactly one)")
    s.add_argument("--port", type=int, default=9100)
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    s.add_argument("--masked-as-error", action="store_true", help="answer unmeasurable episodes with 503, not 200")
    s.add_argument("--idle-timeout", type=_positive, default=120.0, help="end sessions idle this many seconds")
    s.add_argument("--max-concurrent", type=int, default=96, help="episodes (seeded, not verified) at once")
    s.add_argument("--at-capacity", choices=["queue", "reject"], default="queue",
                   help="queue: a seed waits up to --seed-wait s for a free slot, then its verify answers masked "
                   "(works with clients that never retry); reject: answer 503 + Retry-After")  # fmt: skip
    s.add_argument("--seed-wait", type=_positive, default=30.0, help="seconds a queued seed waits for a slot")
    s.add_argument("--token", default=None, help="require `Authorization: Bearer TOKEN` (except GET /health)")
    s.add_argument("--log-level", default="warning")
    s.set_defaults(fn=_serve)
    return p


def main(argv: list[str] | None = None) -> None:
    from prime_rl.envs._cli import run_subcommand

    run_subcommand(build_parser(), argv)
