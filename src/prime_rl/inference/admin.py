"""The inference client's control calls: loading a policy version on every replica, waiting for health, and what
the servers serve (model names, context length).

Weight updates go to every replica that is up, concurrently, and return only when all of them loaded the version;
a replica that fails and no longer answers `/health` is marked down instead. The servers' own side of
`/update_weights` (and who may call it) is `prime_rl.inference.routes` and `prime_rl.inference.guard`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from prime_rl.http import TRANSPORT_ERRORS
from prime_rl.inference.backend import InferenceError, ServedModelMismatch
from prime_rl.inference.routing import Router, ServerUnavailable
from prime_rl.monitor.logger import get_logger

log = get_logger("inference.client")


def check_served_model(name: str, served: dict[str, list[str]]) -> None:
    """Raise ServedModelMismatch (a ValueError) unless every server serves `name` (the same string, or the same
    folder by path): the tokenizer and results table come from `model.name`, the samples from what the server
    serves."""
    for url, ids in served.items():
        if not any(i == name or Path(i).resolve() == Path(name).resolve() for i in ids):
            raise ServedModelMismatch(
                f"model.name = {name!r}, but the inference server at {url} serves {ids}: pass --model.name "
                f"{ids[0] if ids else '<the served model>'} or start `inference --model.name {name}`"
            )


def weight_group(spec, num_servers: int) -> dict:
    """The `group` of a collective `/update_weights` body (without `rank_offset`, which `update_weights` adds per
    server) for a `prime_rl.transport.weight_collective.GroupSpec` over `num_servers` servers of equal size.
    Raises ValueError when the group's inference workers do not split evenly over the servers."""
    workers = spec.world_size - 1
    if num_servers < 1 or workers % num_servers:
        raise ValueError(f"weight_transport.inference_workers = {workers} does not split over {num_servers} inference "
                         "server(s) (client.base_url): set it to servers x tensor_parallel_size")  # fmt: skip
    return {"address": spec.address, "world_size": spec.world_size, "timeout_s": spec.timeout_s,
            "workers_per_server": workers // num_servers}  # fmt: skip


async def update_weights(router: Router, path: str, version: int, known_version: dict[str, int],
                         group: dict | None = None) -> None:  # fmt: skip
    """Load the policy in `path` (weights/step_N/) as `version` on every replica that is up, concurrently, and
    record it in `known_version` (by URL) for each that did. Returns when all of them have reloaded.

    With `group` (`weight_group`), the servers receive the version from the trainer over the weight group instead:
    server i of `router.urls` gets `rank_offset = 1 + i * workers_per_server`. Every server is in the group, so
    every one must take part; a replica that is down makes the transfer time out (an InferenceError).

    Raises:
        InferenceError: a replica that is alive refused or failed (names each).
        NoReplicaLeft: no replica is up (before or after this update)."""
    router.pool.check_alive()
    urls = router.pool.up()

    def body(url: str) -> dict:
        if group is None:
            return {"path": str(path), "version": int(version)}
        offset = 1 + router.urls.index(url) * int(group["workers_per_server"])
        return {"version": int(version), "transport": "collective", "group": {**group, "rank_offset": offset}}

    once = group is not None  # a failed transfer is not sent again: the trainer has given up on it
    results = await asyncio.gather(*(router.post(u, "/update_weights", body(u), retried=not once) for u in urls),
                                   return_exceptions=True)  # fmt: skip
    errors = []
    for url, result in zip(urls, results, strict=True):
        if not isinstance(result, BaseException):
            known_version[url] = int(version)
        elif isinstance(result, ServerUnavailable) and await router.is_dead(url):
            router.pool.mark_down(url, f"update_weights(version={version}): {result}")
        elif isinstance(result, Exception):
            errors.append(f"{url}: {result}")
        else:
            raise result  # cancellation and the like
    if errors:
        raise InferenceError(f"update_weights({path}, version={version}) failed on: " + "; ".join(errors))
    router.pool.check_alive()


async def wait_healthy(router: Router, timeout_s: float) -> None:
    """Poll GET /health on every server every 0.5 s until all answer 200 (at most `timeout_s`); TimeoutError names
    the others."""
    log.info("waiting for inference at %s (client.health_timeout_s = %.0f s; start one with `inference "
             "--model.name ...`)", ", ".join(router.urls), timeout_s)  # fmt: skip
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pending = list(router.urls)
    while True:
        pending = [u for u in pending if await router.is_dead(u)]
        if not pending:
            return
        if loop.time() > deadline:
            raise TimeoutError(
                f"inference server(s) {pending} not healthy after {timeout_s:.0f} s; check client.base_url and "
                "the servers' logs (<output_dir>/logs/vllm.log: outputs/run/ for a standalone `inference`)"
            )
        await asyncio.sleep(0.5)


async def served_models(router: Router) -> dict[str, list[str]]:
    """The model ids each server lists at GET /v1/models (OpenAI API), by URL. Raises InferenceError when a server
    does not answer 200 with JSON."""
    out: dict[str, list[str]] = {}
    for url in router.urls:
        try:
            resp = await router.get(url + "/v1/models", min(10.0, router.cfg.request_timeout_s))
        except TRANSPORT_ERRORS as e:
            raise InferenceError(f"{url}/v1/models: {type(e).__name__}: {e}") from e
        if resp.status != 200:
            raise InferenceError(f"{url}/v1/models answered {resp.status}: {resp.text[:300]}")
        try:
            out[url] = [m["id"] for m in resp.json().get("data", [])]
        except (ValueError, AttributeError, KeyError, TypeError):
            raise InferenceError(f"{url}/v1/models answered an unexpected body: {resp.text[:300]!r}") from None
    return out


async def context_length(router: Router) -> int | None:
    """The smallest context length (tokens) the servers report: vLLM lists `max_model_len` for each model at
    GET /v1/models. None when no server reports one; a server that does not answer is skipped."""
    lens = []
    for url in router.urls:
        try:
            resp = await router.get(url + "/v1/models", min(10.0, router.cfg.request_timeout_s))
            if resp.status != 200:
                continue
            data = resp.json().get("data", [])
            lens += [int(m["max_model_len"]) for m in data if isinstance(m.get("max_model_len"), int)]
        except (*TRANSPORT_ERRORS, ValueError, AttributeError):
            continue
    return min(lens) if lens else None
