"""A NeMo Gym resources server for any built-in environment (FastAPI; run by `env-server serve`).

Speaks the protocol as nemo-gym 0.7 defines it (`nemo_gym.base_resources_server.SimpleResourcesServer`); the
bodies are in `prime_rl.envs.nemo_gym.protocol`, the sessions in `prime_rl.envs.nemo_gym.sessions`.

- `POST /seed_session`, body = a row (answers `{}`) or 0.7's `{resources_session_id, episode_id, task_id,
  task_data}` (answers `{resources_session_id}`); either way a signed session cookie named
  `PrimeRLResourcesServer___<server name>` (NeMo Gym names its cookies `<ServerClass>___<name>`). At
  `max_concurrent` unverified episodes the seed waits up to `seed_wait_s` for a slot; past that the session is
  admitted without an episode and its verify answers masked (`provider_quota_exhausted`), so clients that do not
  retry still get one answer per rollout. `at_capacity="reject"` answers `503` + `Retry-After` instead.
- `POST /<tool>`, body = the tool's JSON arguments: answers `{"output": <the tool's result text>}`. Bad arguments
  get the tool's own error text, so the model sees it.
- `POST /verify`, body = the row plus `response` (a Responses API object of the trajectory): answers the row,
  `response`, `reward`, `mask_sample`, `failure_kind`, `failure_reason`, `metrics`, and each metric again as a
  top-level number (NeMo Gym's aggregate metrics read top-level fields) unless a row field has its name. The first
  verify freezes the episode and frees its capacity slot; a repeated verify answers the same result, and a tool
  call after it changes nothing (and says so).
- `POST /close_session`, body `{resources_session_id, episode_id}` (0.7) or `{}`: ends the session the body or the
  cookie names; idempotent; a closed 0.7 session id cannot be seeded again.
- `POST /aggregate_metrics` (NeMo Gym's `AggregateMetrics`), `GET /reverify_mode` (`"unsupported"`: verify reads
  session state), `GET /health` (`live_sessions`, `active_episodes`, `max_concurrent`; no token needed).

An episode that cannot be measured (no/unknown/expired/closed session, crashed or unmeasurable episode, a reward
that fails the one reward check `envs.base.reward_problem`: a bool, not a number, not finite or outside
`ServerState.reward_range`; no capacity slot) is masked: `200 {reward: 0, mask_sample: true, failure_kind,
failure_reason}` with NeMo Gym's registered failure kinds, or with `masked_as_error` a `503` carrying the same
`failure_kind` (clients must not retry those: only a 503 without `failure_kind` is back-pressure). A metric that is
not a finite number is dropped alone (`envs.base.finite_metrics`). A malformed
body gets FastAPI's `422` naming the field. With a token, requests without `Authorization: Bearer <token>` get 401.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from prime_rl.envs.base import DEFAULT_REWARD_RANGE, Environment, Task, VerifyResult, finite_metrics, reward_problem
from prime_rl.envs.nemo_gym.aggregate import aggregate_metrics
from prime_rl.envs.nemo_gym.protocol import (
    PROVIDER_QUOTA_EXHAUSTED,
    SESSION_LOST,
    VERIFIER_ERROR,
    VERIFY_KEYS,
    AggregateBody,
    CloseBody,
    Row,
    SessionSeed,
    VerifyBody,
    masked_result,
)  # fmt: skip
from prime_rl.envs.nemo_gym.responses import final_text
from prime_rl.envs.nemo_gym.rows import to_chat_tool
from prime_rl.envs.nemo_gym.sessions import Session, SessionStore

COOKIE_PREFIX = "PrimeRLResourcesServer___"


@dataclass
class ServerState:
    """The server's settings, environment and sessions.

    Args:
        env: the environment whose episodes are served.
        name: the server's name (its directory name, e.g. `gridsim_v1`); names the session cookie.
        masked_as_error: answer unmeasurable episodes with 503 + `failure_kind` instead of 200 + `mask_sample`.
        idle_timeout_s: end sessions idle this many seconds (None: never).
        max_concurrent: unverified episodes at once.
        at_capacity: `queue` (wait up to `seed_wait_s` for a slot, then admit a masked session) or `reject` (503).
        token: require `Authorization: Bearer <token>` on every route but `/health`.
        reward_range: rewards accepted (inclusive); one outside masks its episode (`envs.base.reward_problem`).
    """

    env: Environment
    name: str = "prime_rl"
    masked_as_error: bool = False
    idle_timeout_s: float | None = 120.0
    max_concurrent: int = 96
    at_capacity: Literal["queue", "reject"] = "queue"
    seed_wait_s: float = 30.0
    token: str | None = None
    reward_range: tuple[float, float] | None = DEFAULT_REWARD_RANGE
    store: SessionStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = SessionStore(self.max_concurrent, self.idle_timeout_s)

    @property
    def cookie_name(self) -> str:
        return COOKIE_PREFIX + self.name

    @property
    def live(self) -> dict[str, Session]:
        return self.store.live


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


# The dependencies are `async def` although they never wait: FastAPI runs a plain `def` dependency in its thread
# pool, two thread hand-offs per request that cost the server more than any route's own work (seen with py-spy).
async def _state(request: Request) -> ServerState:
    return request.app.state.server


async def require_token(request: Request, state: ServerState = Depends(_state)) -> None:
    """401 unless the request carries `Authorization: Bearer <state.token>` (no token configured: anything)."""
    if state.token is None:
        return
    if not hmac.compare_digest(request.headers.get("authorization", "").encode(), f"Bearer {state.token}".encode()):
        raise HTTPException(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                            headers={"WWW-Authenticate": "Bearer"})  # fmt: skip


def _parse(model: type[BaseModel], body: dict[str, Any], at: tuple[str, ...] = ()) -> Any:
    """`model.model_validate(body)`, or FastAPI's own 422 with the field's location under `body`."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *at, *err["loc"])} for err in e.errors(include_url=False,
                                      include_context=False)]) from None  # fmt: skip


def _task(row: Row) -> Task:
    params = row.responses_create_params
    messages = ([{"role": "user", "content": params.input}] if isinstance(params.input, str) else params.input) if params else []
    return Task(
        task_id="" if row.task_id is None else str(row.task_id), split=row.split or "train", index=row.index or 0,
        messages=messages, tools=[to_chat_tool(t) for t in (params.tools or [])] if params else [], info=row.info or {},
    )  # fmt: skip


def _masked(state: ServerState, kind: str, reason: str, row: dict[str, Any] | None = None) -> Response:
    if state.masked_as_error:
        return _json({"detail": reason, "failure_kind": kind, "failure_reason": reason}, 503)
    return _json({**(row or {}), **masked_result(kind, reason)})


def _verdict(sess: Session, text: str | None,
             reward_range: tuple[float, float] | None = DEFAULT_REWARD_RANGE) -> dict[str, Any]:  # fmt: skip
    """Score `sess` (once): its result, or a masked one for a crashed/unavailable episode or a reward that fails the
    one reward check (`envs.base.reward_problem`: a bool, a non-number, non-finite or outside `reward_range`).
    Metrics that are not finite numbers are dropped (`envs.base.finite_metrics`), the episode is kept."""
    if sess.unavailable is not None:
        return masked_result(PROVIDER_QUOTA_EXHAUSTED, sess.unavailable)
    if sess.crashed is not None:
        return masked_result(VERIFIER_ERROR, sess.crashed)
    try:
        res = sess.episode.verify(text)
    except Exception as e:  # noqa: BLE001 - a crashed episode is masked, never a 500
        return masked_result(VERIFIER_ERROR, f"verify raised {type(e).__name__}: {e}")
    if not isinstance(res, VerifyResult):
        return masked_result(VERIFIER_ERROR, f"verify returned {type(res).__name__}, not a VerifyResult")
    if res.masked:
        return masked_result(VERIFIER_ERROR, res.reason or "the environment could not measure this episode")
    bad = reward_problem(res.reward, reward_range)
    if bad is not None:
        return masked_result(VERIFIER_ERROR, f"the environment returned {bad}")
    return {"reward": float(res.reward), "mask_sample": False, "failure_kind": None, "failure_reason": None,
            "metrics": finite_metrics(res.metrics)}  # fmt: skip


router = APIRouter()
guarded = APIRouter(dependencies=[Depends(require_token)])


@router.get("/health")
async def health(state: ServerState = Depends(_state)) -> Response:
    return _json({"status": "ok", "env": state.env.name, "name": state.name, **state.store.stats(),
                  "max_concurrent": state.max_concurrent, "idle_timeout_s": state.idle_timeout_s})  # fmt: skip


@guarded.get("/reverify_mode")
async def reverify_mode() -> Response:
    return _json("unsupported")


@guarded.post("/aggregate_metrics")
async def aggregate(body: AggregateBody) -> Response:
    return _json(aggregate_metrics(body.verify_responses))


@guarded.post("/seed_session")
async def seed_session(request: Request, body: dict[str, Any] = Body(...), state: ServerState = Depends(_state)) -> Response:
    store = state.store
    answer: dict[str, Any] = {}
    if "resources_session_id" in body:  # NeMo Gym 0.7's session seed
        seed = _parse(SessionSeed, body)
        sid, identity = "r:" + seed.resources_session_id, (seed.episode_id, seed.task_id)
        answer = {"resources_session_id": seed.resources_session_id}
        if sid in store.ended:
            raise HTTPException(409, f"resources session {seed.resources_session_id!r} was already closed")
        if sid in store.live:
            if store.live[sid].identity != identity:
                raise HTTPException(409, "resources_session_id is already bound to another episode or task")
            return _with_cookie(state, _json(answer), sid)
        row = _parse(Row, seed.task_data, ("task_data",))
    else:
        row, sid, identity = _parse(Row, body), store.new_sid(), None
    sess = Session(sid, None, time.monotonic(), identity=identity)
    if state.at_capacity == "reject" and store.active >= state.max_concurrent:
        store.reap(time.monotonic())
        if store.active >= state.max_concurrent:
            return _json({"detail": f"at capacity ({state.max_concurrent} episodes); retry later"}, 503, {"Retry-After": "1"})
    if await store.acquire_slot(state.seed_wait_s if state.at_capacity == "queue" else 0.0):
        sess.holds_slot = True
        try:
            sess.episode = state.env.episode(_task(row))
        except (KeyError, ValueError, TypeError) as e:
            store.release_slot(sess)
            raise RequestValidationError([{"loc": ("body", "info"), "msg": f"cannot start an episode of this row: {e}",
                                           "type": "value_error"}]) from None  # fmt: skip
    else:
        sess.unavailable = (f"no capacity: {state.max_concurrent} episodes stayed busy for the {state.seed_wait_s:g} s "
                            "seed deadline")  # fmt: skip
    if sid in store.live:  # a concurrent 0.7 seed of the same id won the race while this one waited
        store.release_slot(sess)
        return _with_cookie(state, _json(answer), sid)
    store.add(sess)
    return _with_cookie(state, _json(answer), sid)


def _with_cookie(state: ServerState, resp: Response, sid: str) -> Response:
    resp.set_cookie(state.cookie_name, state.store.sign(sid), httponly=True, samesite="lax")
    return resp


def _cookie_sid(state: ServerState, request: Request) -> str | None:
    return state.store.unsign(request.cookies.get(state.cookie_name))


@guarded.post("/verify")
async def verify(request: Request, body: dict[str, Any] = Body(...), state: ServerState = Depends(_state)) -> Response:
    vb = _parse(VerifyBody, body)
    response = vb.response if "response" in body else vb.final_response
    try:
        text = final_text(response)
    except ValueError as e:
        raise RequestValidationError([{"loc": ("body", "response"), "msg": str(e), "type": "value_error"}]) from None
    row = {k: v for k, v in body.items() if k not in ("response", "final_response")}
    row["response"] = response
    found = state.store.lookup(_cookie_sid(state, request))
    sess = found.session
    if sess is None:
        if found.verified is not None:  # verified, then closed: the same answer again
            return _answer(state, row, found.verified)
        return _masked(state, found.kind, found.reason, row)
    if sess.result is None:
        sess.result = _verdict(sess, text, state.reward_range)
        state.store.release_slot(sess)
    return _answer(state, row, sess.result)


def _answer(state: ServerState, row: dict[str, Any], result: dict[str, Any]) -> Response:
    if result["mask_sample"] and state.masked_as_error:
        return _masked(state, result["failure_kind"], result["failure_reason"])
    flat = {k: v for k, v in result["metrics"].items() if k not in row and k not in VERIFY_KEYS}
    return _json({**row, **flat, **result})


@guarded.post("/close_session")
async def close_session(request: Request, body: dict[str, Any] | None = Body(None), state: ServerState = Depends(_state)) -> Response:
    cb = _parse(CloseBody, body or {})
    store, closed = state.store, False
    sid = _cookie_sid(state, request)
    if cb.resources_session_id is not None:
        named = store.live.get("r:" + cb.resources_session_id)
        if named is not None and cb.episode_id is not None and named.identity and named.identity[0] != cb.episode_id:
            raise HTTPException(409, "episode_id does not match the seeded resources session")
    named_sid = "r:" + cb.resources_session_id if cb.resources_session_id is not None else None
    for session_id in (sid, named_sid):
        # a never-seeded 0.7 id is closed for good too
        if session_id is not None and (session_id in store.live or session_id == named_sid):
            closed |= session_id in store.live
            store.end(session_id, SESSION_LOST, "session was closed")
    if cb.resources_session_id is not None:
        return _json({"resources_session_id": cb.resources_session_id})
    return _json({"closed": closed})


@guarded.post("/{tool}")
async def tool(tool: str, request: Request, state: ServerState = Depends(_state)) -> Response:
    raw = await request.body()
    try:
        args = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestValidationError([{"loc": ("body",), "msg": "body must be UTF-8 JSON (the tool's arguments)",
                                       "type": "value_error"}]) from None  # fmt: skip
    found = state.store.lookup(_cookie_sid(state, request))
    sess = found.session
    if sess is None:
        if found.verified is not None:
            return _json({"output": "error: the episode was already verified; this call changed nothing"})
        if state.masked_as_error:
            return _masked(state, found.kind, found.reason)
        return _json({"output": f"error: {found.reason}; this episode's verify will be masked",
                      "failure_kind": found.kind})  # fmt: skip
    if sess.result is not None:
        return _json({"output": "error: the episode was already verified; this call changed nothing"})
    problem = sess.unavailable or sess.crashed
    if problem is None:
        try:
            return _json({"output": sess.episode.call_tool(tool, args)})
        except Exception as e:  # noqa: BLE001 - a crashed episode is masked, never a 500
            problem = sess.crashed = f"tool {tool!r} raised {type(e).__name__}: {e}"
    kind = PROVIDER_QUOTA_EXHAUSTED if sess.unavailable else VERIFIER_ERROR
    if state.masked_as_error:
        return _masked(state, kind, problem)
    return _json({"output": f"error: {problem}; this episode's verify will be masked", "failure_kind": kind})


async def _unprocessable(request: Request, exc: RequestValidationError) -> Response:
    """FastAPI's 422 (`detail`: [{loc, msg, type}]) without echoing the input (which may hold NaN, not JSON)."""
    return _json({"detail": [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in exc.errors()]}, 422)


def create_app(state: ServerState) -> FastAPI:
    """The FastAPI app serving `state.env`. The idle reaper runs while the app's lifespan is active; at shutdown
    every open session ends (`shutdown`)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async def reaper() -> None:
            period = max(0.05, min(1.0, (state.idle_timeout_s or 1.0) / 4))
            while True:
                await asyncio.sleep(period)
                state.store.reap(time.monotonic())

        task = asyncio.create_task(reaper()) if state.idle_timeout_s is not None else None
        yield
        if task is not None:
            task.cancel()
        state.store.shutdown()

    app = FastAPI(title=f"prime-rl resources server: {state.env.name}", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)  # fmt: skip
    app.state.server = state
    app.add_exception_handler(RequestValidationError, _unprocessable)
    app.include_router(router)
    app.include_router(guarded)
    return app


@contextmanager
def serve_in_thread(state: ServerState | Any, host: str = "127.0.0.1", port: int = 0,
                    timeout_s: float = 30.0) -> Iterator[str]:  # fmt: skip
    """Run the server of `state` (or an ASGI app, e.g. `env-server openenv`'s) in a background thread (tests,
    benchmarks); yields its base URL; always shuts it down.

    Raises:
        TimeoutError: it did not start listening within `timeout_s`.
    """
    import threading

    import uvicorn

    app = create_app(state) if isinstance(state, ServerState) else state
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="env-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise TimeoutError(f"env-server on {host}:{port} did not start within {timeout_s} s")
            time.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

