"""Requests to prime-rl's inference replicas: one `HttpClient` (`prime_rl.http`) shared by all of them, the retry
policy of `client.max_retries`, and failover over the replicas of a `ReplicaPool` (`prime_rl.inference.pool`).

Every call the inference client makes is idempotent (sampling changes no server state; loading the same weights as
the same version twice leaves the server as once), so transport errors and 5xx answers are retried
`client.max_retries` times with exponential backoff (0.5 s, 1 s, 2 s, ... capped at 8 s); a 4xx answer is not
retried. A replica that still fails and no longer answers `/health` is marked down (logged) and a routed request
goes to another replica.
"""

from __future__ import annotations

from typing import Any

from prime_rl.config.orchestrator import ClientConfig
from prime_rl.http import NO_RETRY, TRANSPORT_ERRORS, HttpClient, Response, RetriesExhausted, RetryPolicy, Timeouts
from prime_rl.inference.backend import InferenceError
from prime_rl.inference.pool import ReplicaPool


class ServerUnavailable(InferenceError):
    """Transport errors or 5xx answers until the retries ran out."""


def _server_error(resp: Response) -> bool:
    return resp.status >= 500


class Router:
    """POSTs and GETs to the replicas of `cfg.base_url` (see module docstring).

    `pool`: the replicas and which are up; `urls`: their base URLs (no trailing slash).
    """

    def __init__(self, cfg: ClientConfig):
        if not cfg.base_url:
            raise ValueError("client.base_url is empty: give at least one inference server URL")
        self.cfg = cfg
        self.urls = [u.rstrip("/") for u in cfg.base_url]
        self.pool = ReplicaPool(self.urls)
        self.http = HttpClient(Timeouts(connect_s=cfg.connect_timeout_s, read_s=cfg.request_timeout_s),
                               headers={"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None)  # fmt: skip
        self.retry = RetryPolicy(max_retries=cfg.max_retries, first_wait_s=0.5, max_wait_s=8.0)

    @property
    def probe_timeout_s(self) -> float:
        """Total seconds of one health probe."""
        return min(5.0, self.cfg.connect_timeout_s)

    async def get(self, url: str, timeout_s: float) -> Response:
        """One GET of `url` within `timeout_s` seconds in all. Raises a `TRANSPORT_ERRORS` exception."""
        return await self.http.send("GET", url, total_s=timeout_s)

    async def is_dead(self, url: str) -> bool:
        """Whether replica `url` does not answer `GET /health` with 200 now (one quick probe)."""
        try:
            return (await self.get(url + "/health", self.probe_timeout_s)).status != 200
        except TRANSPORT_ERRORS:
            return True

    async def post(self, url: str, route: str, body: dict, retried: bool = True) -> Any:
        """POST `body` as JSON to replica `url` and return the decoded answer, retried per the module docstring
        (`retried=False`: sent once, for a call that must not repeat, e.g. a collective weight update).

        Raises:
            InferenceError: a 4xx answer (at once), or an answer that is not JSON.
            ServerUnavailable: transport errors or 5xx answers after `client.max_retries` retries."""
        try:
            resp = await self.http.request("POST", url + route, json_body=body, idempotent=retried,
                                           retry=self.retry if retried else NO_RETRY,
                                           retry_on=_server_error if retried else None)  # fmt: skip
        except RetriesExhausted as e:
            raise ServerUnavailable(f"{url}{route} failed after {e.attempts} attempts (client.max_retries): "
                                    f"{type(e.last).__name__}: {e.last}") from e.last  # fmt: skip
        if resp.status >= 400:
            raise InferenceError(f"{url}{route} answered {resp.status}: {resp.text[:1000]}")
        try:
            return resp.json()
        except ValueError:
            raise InferenceError(f"{url}{route} answered non-JSON: {resp.text[:300]!r}") from None

    async def post_routed(self, rollout_id: str | None, route: str, body: dict, samples: int = 1) -> tuple[str, Any]:
        """POST to the replica for `rollout_id` (counted as `samples` sequences in flight there); when it fails for
        good and is dead, mark it down and send the request to another replica. Returns (replica URL, answer).

        Raises:
            InferenceError: a 4xx answer, or a failure of a replica that is still alive.
            NoReplicaLeft: every replica is down."""
        tried: set[str] = set()
        while True:
            url = self.pool.pick(rollout_id, exclude=tried)
            try:
                with self.pool.busy(url, samples):
                    return url, await self.post(url, route, body)
            except ServerUnavailable as e:
                if not await self.is_dead(url):
                    raise
                self.pool.mark_down(url, str(e))
                tried.add(url)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()
