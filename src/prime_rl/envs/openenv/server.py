"""`env-server openenv ENV`: a built-in environment's tasks as OpenEnv environments, on openenv-core's own server.

One port, one OpenEnv environment per split, each built by openenv-core's `create_app` (typed `TaskAction` /
`TaskObservation`) and mounted at `/<split>`: `all` (every task: train, then eval) and `eval`. So
`http://HOST:PORT/all` is what an OpenEnv client takes as `base_url`, with OpenEnv's routes under it (`POST /reset`,
`POST /step`, `GET /state`, `/schema`, `/metadata`, `/health`, the `/ws` session, `/mcp`). Ours beside them:
`GET /<split>/tasks` lists the split's tasks (id, own split, index), which OpenEnv's routes cannot; `GET /` names the
environment, its arguments and the splits (what `env-server write URL OUT` reads).

Capacity is openenv-core's: each split's environment holds at most `max_concurrent_envs` WebSocket sessions, and one
more is answered with its `CAPACITY_REACHED` error. OpenEnv has no authentication, so the server binds 127.0.0.1
unless told otherwise.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from prime_rl.config.env_server import EnvServerOpenEnvConfig
from prime_rl.envs.base import Environment

SOURCE_SPLITS = ("train", "eval")  # the built-in environments' splits; `eval` is their one eval split


def split_tasks(env: Environment) -> dict[str, Any]:
    """The `SplitTasks` of each served split: `all` (every task: train, then eval) and one per eval split (`eval`).

    Raises:
        ValueError: two tasks of `all` share an id.
    """
    from prime_rl.envs.openenv.environment import SplitTasks

    by_split = {s: env.tasks(s) for s in SOURCE_SPLITS}
    return {"all": SplitTasks(env, "all", [t for s in SOURCE_SPLITS for t in by_split[s]]),
            "eval": SplitTasks(env, "eval", by_split["eval"])}  # fmt: skip


class _QuietDisconnect:
    """ASGI wrapper of a split's app: a `WebSocketDisconnect` escaping a WebSocket session is dropped. openenv-core
    0.3.0 closes the socket in a `finally` that only catches RuntimeError, so a client that closed first (its own
    EnvClient always does) makes uvicorn log a full traceback for every normal session end (huggingface/OpenEnv#1159).
    The session is already over and cleaned up then; nothing else is swallowed."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


def _listing(tasks: Any):
    """The `GET /<split>/tasks` route of one split (its answer built once: the tasks never change)."""
    body = {"split": tasks.name, "tasks": [{"task_id": t.task_id, "split": t.split, "index": t.index} for t in tasks.tasks]}

    def listing() -> dict[str, Any]:
        return body

    return listing


def build_app(env: Environment, env_name: str, env_args: dict[str, Any], max_concurrent_envs: int = 96):
    """The FastAPI app: openenv-core's app of each split mounted at `/<split>`, plus `GET /` and `GET /<split>/tasks`.

    Returns:
        a FastAPI application (serve it with uvicorn).
    Raises:
        MissingExtraError: openenv-core is not installed (`pip install 'prime-rl[openenv]'`).
    """
    from prime_rl.extras import require

    http_server = require("openenv.core.env_server.http_server", "openenv", "env-server openenv")
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from prime_rl.envs.openenv.environment import ResetError, TaskEnvironment
    from prime_rl.envs.openenv.models import TaskAction, TaskObservation

    async def reset_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=getattr(exc, "status", 422))

    splits = split_tasks(env)
    app = FastAPI(title=f"prime-rl {env_name}: OpenEnv environments", docs_url=None, redoc_url=None)
    for name, tasks in splits.items():
        sub = http_server.create_app(functools.partial(TaskEnvironment, tasks), TaskAction, TaskObservation,
                                     env_name=env_name, max_concurrent_envs=max_concurrent_envs)  # fmt: skip
        sub.add_exception_handler(ResetError, reset_error)

        sub.add_api_route("/tasks", _listing(tasks), methods=["GET"], summary="The split's tasks: id, own split, index")
        app.mount(f"/{name}", _QuietDisconnect(sub))
    info = {"env": env_name, "env_args": env_args, "max_concurrent_envs": max_concurrent_envs,
            "splits": {name: {"path": f"/{name}", "tasks": len(t.tasks)} for name, t in splits.items()}}  # fmt: skip

    @app.get("/")
    def root() -> dict[str, Any]:
        return info

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy", "env": env_name}  # names the environment: rl checks what answers at a URL

    return app


def run(cfg: EnvServerOpenEnvConfig) -> None:
    """Serve `cfg.env` until interrupted.

    Raises:
        KeyError / RegistryError: unknown environment. MissingExtraError: openenv-core is not installed.
        PortInUseError: the port is taken (checked before openenv-core, seconds to import, or any data; names its
            holder).
    """
    from prime_rl.ports import check_port_free

    check_port_free(cfg.host, cfg.port, field="port")
    import uvicorn

    from prime_rl.envs.base import load_env, refuse_user_turns

    env_args = cfg.env_args()
    env = load_env(cfg.env, **env_args)
    refuse_user_turns(env, "OpenEnv's step protocol as served here")
    app = build_app(env, cfg.env, env_args, cfg.max_concurrent_envs)
    base = f"http://{cfg.host}:{cfg.port}"
    if cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {cfg.host}: OpenEnv has no authentication, anyone who reaches the port can play",
              file=sys.stderr)  # fmt: skip
    print(f"serving {cfg.env} as OpenEnv environments: {base}/all, {base}/eval (task lists at /<split>/tasks; "
          f"max_concurrent_envs {cfg.max_concurrent_envs} per split)", flush=True)  # fmt: skip
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level=cfg.log_level, access_log=False)
