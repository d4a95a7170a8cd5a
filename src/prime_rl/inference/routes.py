"""prime-rl's control routes, added to vLLM's own FastAPI app (see `vllm_entry`).

`POST /update_weights {"path": "<run>/weights/step_N", "version": N}`
    pause generation (mode from `PRIME_RL_PAUSE_MODE`: `wait` lets in-flight requests finish on the old weights,
    `keep` freezes them and resumes them on the new ones, `abort` ends them with finish_reason "abort"),
    reload every weight in place on every worker (`PrimeWorkerExtension.prime_load_weights`), reset the prefix
    cache (stale KV otherwise matches neither policy), label later tokens with `version`, resume.
    200 -> {"version", "path", "reload_s", "num_tensors", "refreshed", "pause_s", "load_s", "reset_s", "resume_s"}
    (`refreshed`: modules sharing a parameter, e.g. a tied output head, whose kernel state was rebuilt; the `*_s`
    fields time each phase); 400 bad path/body; 500 engine failure (the error text).
    403 a path outside the server's weights directory (`prime_rl.inference.guard`).
`POST /update_weights {"version": N, "transport": "collective", "group": {"address", "world_size", "timeout_s",
"rank_offset", "workers_per_server"}}`
    the same, but every worker receives version N from the trainer over the weight group
    (`PrimeWorkerExtension.prime_receive_weights`; it joins the group first when needed). A transfer that fails
    leaves the weights and the recorded version as they were: 500 with the error. `path` is `collective:<address>`;
    `receive_s` (first worker) is the part of `load_s` spent joining and receiving.
`GET /policy_version` -> {"version": int | null, "path": str | null}

Updates are serialised by a lock. vLLM's dev-mode route of the same name (NCCL/IPC weight transfer) is replaced.
Both routes, and every other admin route of the server, need the admin token where one is configured or the
server is not on loopback (`prime_rl.inference.guard.AdminGuard`, added by `attach`).
"""

from __future__ import annotations

import asyncio
import os
import time

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from prime_rl.inference.guard import AdminGuard, AdminPolicy

router = APIRouter()
_lock = asyncio.Lock()
_state: dict = {"version": 0, "path": None}


def _engine(request: Request):
    return request.app.state.engine_client


def _policy(request: Request) -> AdminPolicy:
    """The admin policy `attach` stored on the app (loopback and any folder when the app was built without it)."""
    return getattr(request.app.state, "prime_admin", None) or AdminPolicy(host="127.0.0.1")


async def _reset_prefix_cache(engine, attempts: int = 50) -> None:
    for _ in range(attempts):
        if await engine.reset_prefix_cache():
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"reset_prefix_cache kept failing after {attempts} attempts (blocks still held)")


async def _pause(engine, mode: str) -> None:
    """Pause scheduling (draining or freezing in-flight requests per `mode`) and clear the KV and prefix caches.

    vLLM 0.32's `AsyncLLM.pause_generation` does this in the engine core and then sleeps 20 ms so that outputs of
    requests that finished meanwhile reach their callers first (ordering only, "not required for correctness" in
    its own words). That sleep can be as long as a small model's whole reload, so the engine core is asked directly
    when this vLLM has the call; otherwise `pause_generation`."""
    core = getattr(engine, "engine_core", None)
    if hasattr(core, "pause_scheduler_async"):
        await core.pause_scheduler_async(mode=mode, clear_cache=True)
    else:
        await engine.pause_generation(mode=mode)


def _is_version(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


GROUP_FIELDS = {"address": str, "world_size": int, "timeout_s": (int, float), "rank_offset": int,
                "workers_per_server": int}  # fmt: skip


def _collective_problem(body: dict) -> str | None:
    """What is wrong with a collective update's body (None: nothing)."""
    if not _is_version(body.get("version")):
        return f"a collective update needs version = a non-negative integer, got {body.get('version')!r}"
    group = body.get("group")
    if not isinstance(group, dict):
        return 'a collective update needs "group": {' + ", ".join(GROUP_FIELDS) + "}"
    for name, kind in GROUP_FIELDS.items():
        if not isinstance(group.get(name), kind) or isinstance(group.get(name), bool):
            return f"group.{name} is missing or not a {getattr(kind, '__name__', 'number')}: {group.get(name)!r}"
    return None


@router.post("/update_weights")
async def update_weights(request: Request) -> JSONResponse:
    from prime_rl.inference.weight_loading import WeightsDirError, safetensors_files

    try:
        body = await request.json()
    except ValueError as e:
        return JSONResponse({"error": f"body is not JSON: {e}"}, status_code=400)
    if isinstance(body, dict) and body.get("transport") == "collective":
        problem = _collective_problem(body)
        if problem is not None:
            return JSONResponse({"error": problem}, status_code=400)
        version = body["version"]
        path, rpc, args = f"collective:{body['group']['address']}", "prime_receive_weights", (version, body["group"])
    else:
        if not isinstance(body, dict) or not isinstance(body.get("path"), str):
            return JSONResponse({"error": 'body must be {"path": "<weights dir>", "version": <int>}'}, status_code=400)
        path, version, rpc = body["path"], body.get("version"), "prime_load_weights"
        if version is not None and not _is_version(version):
            return JSONResponse({"error": f"version must be a non-negative integer, got {version!r}"}, status_code=400)
        refused = _policy(request).refuse_weights_path(path)
        if refused is not None:
            return JSONResponse({"error": refused}, status_code=403)
        try:
            safetensors_files(path)
        except WeightsDirError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        args = (path,)

    engine = _engine(request)
    mode = os.environ.get("PRIME_RL_PAUSE_MODE", "wait")
    async with _lock:
        t0 = time.perf_counter()
        marks = {}
        await _pause(engine, mode)
        marks["pause_s"] = time.perf_counter() - t0
        try:
            results = await engine.collective_rpc(rpc, args=args)
            marks["load_s"] = time.perf_counter() - t0 - sum(marks.values())
            await _reset_prefix_cache(engine)
            marks["reset_s"] = time.perf_counter() - t0 - sum(marks.values())
            if version is not None:
                await engine.update_weight_version(str(version))
                _state["version"] = version
            _state["path"] = path
        except Exception as e:  # noqa: BLE001 - reported to the caller
            return JSONResponse({"error": f"weight reload from {path} failed: {type(e).__name__}: {e}"}, 500)
        finally:
            t1 = time.perf_counter()
            await engine.resume_generation()
            marks["resume_s"] = time.perf_counter() - t1
        first = results[0] if results and isinstance(results[0], dict) else {}
    return JSONResponse(
        {"version": _state["version"], "path": path, "reload_s": time.perf_counter() - t0,
         "num_tensors": first.get("num_tensors"), "refreshed": first.get("refreshed", []), **marks,
         **({"receive_s": first["receive_s"]} if "receive_s" in first else {})}
    )  # fmt: skip


@router.get("/policy_version")
async def policy_version() -> JSONResponse:
    return JSONResponse({"version": _state["version"], "path": _state["path"]})


def attach(app: FastAPI, policy: AdminPolicy | None = None) -> FastAPI:
    """Add our routes to `app`, replacing any existing route with the same path and method (vLLM's dev
    `/update_weights`), and guard its admin routes with `policy` (default: `AdminPolicy.from_vllm_args` of
    `app.state.args`, the namespace vLLM's `build_app` stores). Returns `app`."""
    if policy is None:
        policy = AdminPolicy.from_vllm_args(getattr(app.state, "args", None))
    app.state.prime_admin = policy
    if app.middleware_stack is None:
        app.add_middleware(AdminGuard, policy=policy)
    else:  # vLLM's build_app already built its middleware stack (its SageMaker bootstrap): guard in front of it
        app.middleware_stack = AdminGuard(app.middleware_stack, policy)
    ours = {(r.path, m) for r in router.routes if isinstance(r, APIRoute) for m in r.methods}
    kept = []
    for route in app.router.routes:
        if isinstance(route, APIRoute) and any((route.path, m) in ours for m in route.methods):
            continue
        kept.append(route)
    app.router.routes[:] = kept
    # Insert ahead of mounts/catch-alls so ours match first.
    app.router.routes[:0] = list(router.routes)
    return app
