"""How a command reaches the inference server(s): `[client]` of the orchestrator, `[backend]` of `evals` with
`type = "server"`."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from prime_rl.config.base import BaseConfig


def server_root(url: str) -> str:
    """The root URL of an inference server, to which prime-rl adds its routes (`/health`, `/v1/completions`, ...):
    `url` without a trailing `/`, and without a trailing `/v1` (the OpenAI-style base URL the reference prime-rl's
    client takes, `http://localhost:8000/v1`, names the same server).

    Raises:
        ValueError: `url` is not an absolute http(s) URL with a host (and a port in 1..65535 where given), or has a
            path other than `/v1` (a route would be added after it and answer 404); the message gives the fix."""
    root = url.strip().rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    parts = urlsplit(root)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        hint = f"http://{url.strip()}" if "://" not in url else "http://HOST:PORT (e.g. http://127.0.0.1:8000)"
        raise ValueError(f"{url!r} is not an http(s) URL with a host: write {hint}")
    if parts.path or parts.query or parts.fragment:
        raise ValueError(f"{url!r} has a path: prime-rl adds its routes (/health, /v1/completions, ...) to the "
                         f"server's root URL, so write {parts.scheme}://{parts.netloc} (a trailing /v1 is accepted)")  # fmt: skip
    return root


class ClientConfig(BaseConfig):
    """How the orchestrator reaches the inference server(s)."""

    base_url: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000"],
        description="One URL per inference server (a rollout goes to the least-loaded healthy one, then stays): "
        "http(s)://HOST:PORT; a trailing /v1 (the OpenAI-style base URL) is dropped.",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="Read timeout of one generate request.")
    connect_timeout_s: float = Field(10.0, gt=0, description="TCP connect timeout of one request.")
    max_retries: int = Field(5, ge=0, description="Retries on 5xx and transport errors (exponential backoff).")
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for the servers' /health at start.")
    api_key: str | None = Field(None, description="Sent as `Authorization: Bearer KEY` (servers started with one).")
    parallel_sampling: bool = Field(
        False,
        description="Send the generate calls that ask for the same prompt with the same settings at once (a group's "
        "first turn) as one request with n samples (vLLM parallel sampling: the prompt is prefilled once, fewer "
        "requests). Seeds are per request (choice i: seed + i), so seeded runs sample differently than with false. "
        "backend = server only.",
    )

    @field_validator("base_url")
    @classmethod
    def _server_roots(cls, urls: list[str]) -> list[str]:
        return [server_root(u) for u in urls]
