"""Who may call the inference server's admin routes, and which folders `/update_weights` may load.

Admin routes are every route of the server except the sampling API and the probes (`is_public`): prime-rl's
`POST /update_weights` and `GET /policy_version`, vLLM's development routes (`/collective_rpc`, `/sleep`,
`/pause`, `/reset_prefix_cache`, ..., on because prime-rl starts vLLM with `VLLM_SERVER_DEV_MODE=1`) and the
LoRA adapter routes. vLLM's own `--api-key` guards only `/v1`, `/v2`, `/inference` and `/cohere`, so these
are guarded here (`AdminGuard`, an ASGI middleware added by `prime_rl.inference.routes.attach`):

- A request to an admin route must carry `Authorization: Bearer <token>`, where the token is the server's own
  (`server.token`, or the environment variable `PRIME_RL_INFERENCE_TOKEN`) or one of vLLM's API keys (`--api-key`
  in `vllm.extra_args`, or `VLLM_API_KEY`). Wrong or missing: 401.
- On a loopback bind (`127.0.0.0/8`, `::1`, `localhost`) with no token configured, admin routes are open, as the
  rest of the server is. On any other bind with no token configured they are refused (403) with a message naming
  the settings, and the server warns at start.
- `/update_weights` loads only folders inside the weights directory (`server.weights_dir`, default
  `<output_dir>/weights`, compared after resolving symbolic links); any other path gets 403 naming the directory,
  unless `server.any_weights_path = true`.

The policy reaches vLLM's process through environment variables set by `prime_rl.inference.server.build_env`
(`ENV_*` below); the bind address and API keys come from vLLM's own arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from prime_rl.http import is_loopback

ENV_TOKEN = "PRIME_RL_INFERENCE_TOKEN"
ENV_HOST = "PRIME_RL_INFERENCE_HOST"
ENV_WEIGHTS_DIR = "PRIME_RL_WEIGHTS_DIR"  # a folder, or "*" for any folder

# the sampling API and the probes; everything else is an admin route
PUBLIC_PREFIXES = ("/v1/", "/v2/", "/inference/", "/cohere/")
PUBLIC_PATHS = frozenset({
    "/health", "/ping", "/version", "/metrics", "/load", "/tokenize", "/detokenize", "/invocations", "/pooling",
    "/classify", "/score", "/rerank", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
})  # fmt: skip
ADMIN_UNDER_PUBLIC = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})


def is_public(path: str) -> bool:
    """Whether `path` is part of the sampling API or a probe (no admin token needed)."""
    if path in ADMIN_UNDER_PUBLIC:
        return False
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class AdminPolicy:
    """What the admin routes require.

    host: the bind address; tokens: the accepted bearer tokens (empty: none configured); weights_dir: the folder
    `/update_weights` may load from (its subfolders), None for any folder.
    """

    host: str
    tokens: tuple[str, ...] = ()
    weights_dir: Path | None = None

    @classmethod
    def from_vllm_args(cls, args: Any, environ: dict[str, str] | None = None) -> AdminPolicy:
        """The policy of a vLLM server started with `args` (its argparse namespace: `host`, `api_key`) and the
        `ENV_*` variables in `environ` (default: this process's). Without `ENV_WEIGHTS_DIR`, `/update_weights`
        loads from any folder (vLLM started by hand; `inference` always sets it)."""
        env = os.environ if environ is None else environ
        host = env.get(ENV_HOST) or getattr(args, "host", None) or "0.0.0.0"
        keys = list(getattr(args, "api_key", None) or [env.get("VLLM_API_KEY")])
        tokens = tuple(t for t in [env.get(ENV_TOKEN), *keys] if t)
        wd = env.get(ENV_WEIGHTS_DIR)
        return cls(host=host, tokens=tokens, weights_dir=None if wd in (None, "", "*") else Path(wd))

    def refuse_caller(self, authorization: str | None) -> tuple[int, str] | None:
        """None when a request with this `Authorization` header may use an admin route, else (HTTP status,
        message): 401 for a missing or wrong token, 403 when the server is not on loopback and has no token."""
        if not self.tokens:
            if is_loopback(self.host):
                return None
            return 403, (
                f"this inference server listens on {self.host} (not loopback) and has no token, so its admin routes "
                f"are closed: start it with --server.token TOKEN (or {ENV_TOKEN}, or vLLM's --api-key) and send "
                "`Authorization: Bearer TOKEN` (orchestrator.client.api_key), or bind 127.0.0.1"
            )
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and any(hmac.compare_digest(_digest(given), _digest(t)) for t in self.tokens):
            return None
        return 401, "admin route: missing or wrong bearer token (send `Authorization: Bearer TOKEN`)"

    def refuse_weights_path(self, path: str) -> str | None:
        """None when `/update_weights` may load `path`, else the reason (outside `weights_dir`, symbolic links
        resolved)."""
        if self.weights_dir is None:
            return None
        root = self.weights_dir.resolve()
        if Path(path).resolve().is_relative_to(root):
            return None
        return (
            f"weights path {path} is outside this server's weights directory {root}: /update_weights loads only "
            "policies published there; start inference with --server.weights-dir DIR or "
            "--server.any-weights-path to load from elsewhere"
        )


class AdminGuard:
    """ASGI middleware that answers a request to an admin route (`is_public` is False) with the status and message
    of `policy.refuse_caller` when the caller may not use it. Other requests pass untouched."""

    def __init__(self, app: ASGIApp, policy: AdminPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("method") != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if not is_public(path):
                refused = self.policy.refuse_caller(Headers(scope=scope).get("authorization"))
                if refused is not None:
                    status, message = refused
                    await JSONResponse({"error": message}, status_code=status)(scope, receive, send)
                    return
        await self.app(scope, receive, send)
