"""Routing over several inference replicas (data-parallel inference): which replica serves a request, which are
down.

- A rollout's first request goes to the replica with the fewest outstanding sequences among those up (ties: the
  one picked least recently, so an idle pool alternates); its later turns stay on the same replica (its prefix
  cache holds the earlier turns) while that replica is up.
- A replica whose request failed for good (transport errors or 5xx after the client's retries) and whose
  `GET /health` does not answer either is marked down, logged with the reason and never picked again in this run.
  A request it held is retried on another replica (token-in/token-out requests carry the whole prompt, and every
  replica that is up holds the same policy version). When no replica is left, `NoReplicaLeft` is raised.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger("prime_rl.inference.pool")

_STICKY_MAX = 100_000


class NoReplicaLeft(RuntimeError):
    """Every inference replica is down (the message names each and why)."""


@dataclass
class Replica:
    """One server: its URL, sequences in flight (a request with n samples counts n), requests sent so far, and why
    it is down (None while up)."""

    url: str
    outstanding: int = 0
    sent: int = 0
    last_pick: int = -1
    down: str | None = None


class ReplicaPool:
    """Least-outstanding-requests routing with per-rollout stickiness over `urls` (see module docstring)."""

    def __init__(self, urls: list[str]):
        if not urls:
            raise ValueError("client.base_url is empty: give at least one inference server URL")
        self.replicas = {u: Replica(u) for u in urls}
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._clock = itertools.count()

    @property
    def urls(self) -> list[str]:
        return list(self.replicas)

    def up(self) -> list[str]:
        """URLs of the replicas not marked down, in configured order."""
        return [u for u, r in self.replicas.items() if r.down is None]

    def check_alive(self) -> None:
        """Raise `NoReplicaLeft` when every replica is down."""
        if not self.up():
            why = "; ".join(f"{u}: {r.down}" for u, r in self.replicas.items())
            raise NoReplicaLeft(f"every inference replica is down ({why}); see their logs (vllm*.log)")

    def pick(self, rollout_id: str | None = None, exclude: set[str] | frozenset[str] = frozenset()) -> str:
        """The replica for the next request of `rollout_id` (None: no stickiness).

        Raises:
            NoReplicaLeft: no replica is up (outside `exclude`)."""
        if rollout_id is not None and rollout_id in self._sticky:
            url = self._sticky[rollout_id]
            if self.replicas[url].down is None and url not in exclude:
                self._sticky.move_to_end(rollout_id)
                return url
        cands = [r for r in self.replicas.values() if r.down is None and r.url not in exclude]
        if not cands:
            self.check_alive()
            raise NoReplicaLeft(f"no inference replica left to retry on (tried {sorted(exclude)})")
        best = min(cands, key=lambda r: (r.outstanding, r.last_pick))
        best.last_pick = next(self._clock)
        if rollout_id is not None:
            self.pin(rollout_id, best.url)
        return best.url

    def pin(self, rollout_id: str, url: str) -> None:
        """Send `rollout_id`'s later requests to `url` (a request made for it under another rollout's id, e.g. a
        parallel-sampling request for its group, landed there)."""
        self._sticky[rollout_id] = url
        self._sticky.move_to_end(rollout_id)
        if len(self._sticky) > _STICKY_MAX:
            self._sticky.popitem(last=False)

    @contextlib.contextmanager
    def busy(self, url: str, samples: int = 1) -> Iterator[None]:
        """Count one request of `samples` sequences (n > 1: parallel sampling) in flight on `url` for the duration
        of the block: `outstanding` counts sequences, so a request with n = 8 weighs as 8 single ones."""
        replica = self.replicas[url]
        replica.outstanding += samples
        replica.sent += 1
        try:
            yield
        finally:
            replica.outstanding -= samples

    def mark_down(self, url: str, reason: str) -> None:
        """Take `url` out of routing for the rest of the run (logged once, with how many replicas are left)."""
        replica = self.replicas[url]
        if replica.down is not None:
            return
        replica.down = reason
        left = self.up()
        log.warning(
            "inference replica %s is down (%s); %d of %d replicas left%s", url, reason, len(left), len(self.replicas),
            f": {', '.join(left)}" if left else "",
        )
