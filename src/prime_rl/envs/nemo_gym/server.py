"""A NeMo Gym resources server for any built-in environment (FastAPI; run by `env-server serve`).

Routes (JSON bodies; the session rides in a signed `session` cookie):

- `POST /seed_session`, body = a row: starts the episode, answers `{}` + `Set-Cookie: session=...`. Past
  `max_concurrent` live sessions: `503` + `Retry-After`.
- `POST /<tool>`, body = the tool's JSON arguments: answers the tool's result text (`text/plain`). Bad arguments
  get the tool's own error text (200), so the model sees it.
- `POST /verify`, body = the row plus the model's final `response` (a Responses API object, or a string): answers
  the row plus `reward`, `mask_sample`, `failure_kind`, `failure_reason` and `metrics`. Ends the episode (a second
  verify answers the same result).
- `POST /close_session`: ends the episode; idempotent.
- `GET /health`: `{status, env, live_sessions, max_concurrent, idle_timeout_s}` (no token needed: no secrets).

An episode that cannot be measured (no/unknown/expired session, crashed episode, verify after close) is masked:
`200 {reward: 0, mask_sample: true, failure_kind, failure_reason}`, or with `masked_as_error` a `503` carrying
the same `failure_kind` / `failure_reason` (clients must not retry those: only a 503 without `failure_kind` is
back-pressure). A malformed body gets `422 {"detail": [{"loc": ["body", field...], "msg"}]}`. With a token,
requests without `Authorization: Bearer <token>` get 401. Sessions live in memory; nothing is pickled.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from prime_rl.envs.base import Environment, Episode
from prime_rl.envs.nemo_gym.rows import row_to_task

COOKIE = "session"
_TOMBSTONES = 100_000


class BodyError(ValueError):
    def __init__(self, loc: list[str | int], msg: str):
        super().__init__(msg)
        self.loc, self.msg = loc, msg


@dataclass
class Session:
    episode: Episode
    last_seen: float
    result: dict[str, Any] | None = None
    crashed: str | None = None


@dataclass
class ServerState:
    env: Environment
    masked_as_error: bool = False
    idle_timeout_s: float | None = 120.0
    max_concurrent: int = 96
    token: str | None = None
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    live: dict[str, Session] = field(default_factory=dict)
    ended: OrderedDict[str, tuple[str, dict[str, Any] | None]] = field(default_factory=OrderedDict)

    def sign(self, sid: str) -> str:
        return f"{sid}.{hmac.new(self.key, sid.encode(), hashlib.sha256).hexdigest()[:32]}"

    def unsign(self, cookie: str | None) -> str | None:
        if not cookie or "." not in cookie:
            return None
        sid, _, sig = cookie.rpartition(".")
        return sid if hmac.compare_digest(self.sign(sid), cookie) else None

    def end(self, sid: str, kind: str) -> None:
        sess = self.live.pop(sid, None)
        if sess is not None:
            try:
                sess.episode.close()
            except Exception:  # noqa: BLE001 - closing must not fail the request
                pass
            self.ended[sid] = (kind, sess.result)
            while len(self.ended) > _TOMBSTONES:
                self.ended.popitem(last=False)

    def reap(self, now: float) -> int:
        if self.idle_timeout_s is None:
            return 0
        old = [sid for sid, s in self.live.items() if now - s.last_seen > self.idle_timeout_s]
        for sid in old:
            self.end(sid, "expired")
        return len(old)


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _unprocessable(e: BodyError) -> Response:
    return _json({"detail": [{"loc": ["body", *e.loc], "msg": e.msg, "type": "value_error"}]}, 422)


async def _body_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise BodyError([], "body must be a JSON object, got an empty body")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BodyError([], f"body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise BodyError([], f"body must be a JSON object, got {type(body).__name__}")
    return body


def _validate_row(body: dict[str, Any]) -> None:
    params = body.get("responses_create_params")
    if not isinstance(params, dict):
        raise BodyError(["responses_create_params"], "required: an object with `input` (messages) and `tools`")
    inp = params.get("input")
    if not isinstance(inp, list | str):
        raise BodyError(["responses_create_params", "input"], "required: a list of messages")
    if isinstance(inp, list):
        for i, m in enumerate(inp):
            if not isinstance(m, dict):
                raise BodyError(["responses_create_params", "input", i], "each message must be an object")
    tools = params.get("tools", [])
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise BodyError(["responses_create_params", "tools"], "must be a list of function tool objects")
    if not isinstance(body.get("task_id"), str):
        raise BodyError(["task_id"], "required: a string")
    if "info" in body and body["info"] is not None and not isinstance(body["info"], dict):
        raise BodyError(["info"], "must be an object")
    if "index" in body and (isinstance(body["index"], bool) or not isinstance(body["index"], int)):
        raise BodyError(["index"], "must be an integer")
    if "split" in body and not isinstance(body["split"], str):
        raise BodyError(["split"], "must be a string")


def final_text(response: Any) -> str | None:
    """The model's final assistant text from a Responses API object (last `message` item's `output_text`
    parts), a chat message `{content}`, or a plain string. Raises BodyError for other shapes."""
    if response is None or isinstance(response, str):
        return response
    if not isinstance(response, dict):
        raise BodyError(["response"], "must be a Responses API object, a message object or a string")
    if isinstance(response.get("output_text"), str):
        return response["output_text"]
    output = response.get("output")
    if isinstance(output, list):
        text = None
        for item in output:
            if isinstance(item, dict) and item.get("type", "message") == "message":
                content = item.get("content")
                if isinstance(content, str):
                    text = content
                elif isinstance(content, list):
                    text = "".join(
                        p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
                    )
        return text
    if isinstance(response.get("content"), str):
        return response["content"]
    if "output" in response:
        raise BodyError(["response", "output"], "must be a list of output items")
    return None


def create_app(state: ServerState) -> FastAPI:
    """The FastAPI app serving `state.env`. The idle reaper runs while the app's lifespan is active."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async def reaper() -> None:
            period = max(0.05, min(1.0, (state.idle_timeout_s or 1.0) / 4))
            while True:
                await asyncio.sleep(period)
                state.reap(time.monotonic())

        task = asyncio.create_task(reaper()) if state.idle_timeout_s is not None else None
        yield
        if task is not None:
            task.cancel()
        for sid in list(state.live):
            state.end(sid, "closed")

    app = FastAPI(title=f"prime-rl resources server: {state.env.name}", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)  # fmt: skip

    def unauthorized(request: Request) -> Response | None:
        if state.token is None:
            return None
        auth = request.headers.get("authorization", "")
        if hmac.compare_digest(auth.encode(), f"Bearer {state.token}".encode()):
            return None
        return _json({"detail": "missing or wrong bearer token (Authorization: Bearer <token>)"}, 401)

    def masked(kind: str, reason: str, row: dict[str, Any] | None = None) -> Response:
        if state.masked_as_error:
            return _json({"detail": reason, "failure_kind": kind, "failure_reason": reason}, 503)
        out = dict(row or {})
        out.update(reward=0.0, mask_sample=True, failure_kind=kind, failure_reason=reason, metrics={})
        return _json(out)

    def lookup(request: Request) -> tuple[str | None, Session | None, tuple[str, str]]:
        sid = state.unsign(request.cookies.get(COOKIE))
        if sid is None:
            why = ("no session cookie" if COOKIE not in request.cookies else
                   "session cookie not signed by this server process (restarted since the session was seeded?)")  # fmt: skip
            return None, None, ("unknown_session", f"{why}; call /seed_session first")
        sess = state.live.get(sid)
        if sess is None:
            kind = state.ended.get(sid, ("unknown", None))[0]
            reasons = {"expired": "session expired (idle timeout)", "closed": "session was closed"}
            return sid, None, (f"{kind}_session", reasons.get(kind, "unknown session"))
        sess.last_seen = time.monotonic()
        return sid, sess, ("", "")

    @app.get("/health")
    async def health() -> Response:
        return _json({"status": "ok", "env": state.env.name, "live_sessions": len(state.live),
                      "max_concurrent": state.max_concurrent, "idle_timeout_s": state.idle_timeout_s})  # fmt: skip

    @app.post("/seed_session")
    async def seed_session(request: Request) -> Response:
        if (r := unauthorized(request)) is not None:
            return r
        try:
            body = await _body_object(request)
            _validate_row(body)
        except BodyError as e:
            return _unprocessable(e)
        if len(state.live) >= state.max_concurrent:
            state.reap(time.monotonic())
            if len(state.live) >= state.max_concurrent:
                return _json({"detail": f"at capacity ({state.max_concurrent} live sessions); retry later"}, 503,
                             {"Retry-After": "1"})  # fmt: skip
        try:
            episode = state.env.episode(row_to_task(body))
        except (KeyError, ValueError, TypeError) as e:
            return _unprocessable(BodyError(["info"], f"cannot start an episode of this row: {e}"))
        sid = secrets.token_urlsafe(18)
        state.live[sid] = Session(episode, time.monotonic())
        resp = _json({})
        resp.set_cookie(COOKIE, state.sign(sid), httponly=True, samesite="lax")
        return resp

    @app.post("/verify")
    async def verify(request: Request) -> Response:
        if (r := unauthorized(request)) is not None:
            return r
        try:
            body = await _body_object(request)
            text = final_text(body.get("response", body.get("final_response")))
        except BodyError as e:
            return _unprocessable(e)
        row = {k: v for k, v in body.items() if k not in ("response", "final_response")}
        sid, sess, (kind, reason) = lookup(request)
        if sess is None:
            done = state.ended.get(sid) if sid else None
            if done is not None and done[1] is not None:  # verified, then closed: answer the same result again
                return _json({**row, **done[1]})
            return masked(kind, reason, row)
        if sess.result is None:
            if sess.crashed:
                state.end(sid, "closed")
                return masked("episode_error", sess.crashed, row)
            try:
                res = sess.episode.verify(text)
            except Exception as e:  # noqa: BLE001 - a crashed episode is masked, never a 500
                state.end(sid, "closed")
                return masked("episode_error", f"verify raised {type(e).__name__}: {e}", row)
            sess.result = {
                "reward": float(res.reward),
                "mask_sample": bool(res.masked),
                "failure_kind": "unmeasurable" if res.masked else None,
                "failure_reason": res.reason if res.masked else None,
                "metrics": {k: float(v) for k, v in res.metrics.items()},
            }
            state.end(sid, "closed")
        return _json({**row, **sess.result})

    @app.post("/close_session")
    async def close_session(request: Request) -> Response:
        if (r := unauthorized(request)) is not None:
            return r
        sid = state.unsign(request.cookies.get(COOKIE))
        was_live = sid is not None and sid in state.live
        if was_live:
            state.end(sid, "closed")
        return _json({"closed": was_live})

    @app.post("/{tool}")
    async def tool(tool: str, request: Request) -> Response:
        if (r := unauthorized(request)) is not None:
            return r
        raw = await request.body()
        try:
            args: dict[str, Any] | str = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _unprocessable(BodyError([], "body must be UTF-8 JSON (the tool's arguments)"))
        sid, sess, (kind, reason) = lookup(request)
        if sess is None:
            if state.masked_as_error:
                return masked(kind, reason)
            return PlainTextResponse(f"error: {reason}; this episode will be masked")
        if sess.result is not None:
            return PlainTextResponse("error: the episode is already verified")
        try:
            return PlainTextResponse(sess.episode.call_tool(tool, args))
        except Exception as e:  # noqa: BLE001 - a crashed episode is masked, never a 500
            sess.crashed = f"tool {tool!r} raised {type(e).__name__}: {e}"
            if state.masked_as_error:
                return masked("episode_error", sess.crashed)
            return PlainTextResponse(f"error: the environment failed ({sess.crashed}); this episode will be masked")

    return app


@contextmanager
def serve_in_thread(state: ServerState, host: str = "127.0.0.1", port: int = 0,
                    timeout_s: float = 30.0) -> Iterator[str]:  # fmt: skip
    """Run the server in a background thread (tests, benchmarks); yields its base URL; always shuts it down.

    Raises:
        TimeoutError: it did not start listening within `timeout_s`.
    """
    import threading

    import uvicorn

    config = uvicorn.Config(create_app(state), host=host, port=port, log_level="warning", access_log=False)
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
