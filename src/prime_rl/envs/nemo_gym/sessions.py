"""The resources server's sessions: signed cookies, capacity slots, idle expiry and what ended sessions leave.

A session is one episode of one row. It holds a capacity slot from its seed until it is verified, closed or
expires: at most `max_concurrent` unverified episodes run at once. A verified session stays readable (a repeated
verify answers the same result, as NeMo Gym's verify is repeatable) until it is closed or idles out. Ended
sessions leave a tombstone (why they ended, and their verify result) so late requests get a precise answer,
and a closed NeMo Gym 0.7 session id cannot be seeded again. Everything lives in memory; nothing is pickled.

The cookie value is `<session id>.<HMAC-SHA256 of it under a per-process key>`: a cookie from another server
process (a restart) or a forged one names no session.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from prime_rl.envs.base import Episode
from prime_rl.envs.nemo_gym.protocol import SESSION_EXPIRED, SESSION_LOST, SHUTDOWN

_TOMBSTONES = 100_000


@dataclass
class Session:
    """One seeded episode. `episode` is None for a session admitted without a slot (`unavailable` says why:
    its verify is masked). `identity`: the (episode_id, task_id) a 0.7 seed bound it to."""

    sid: str
    episode: Episode | None
    last_seen: float
    identity: tuple[Any, Any] | None = None
    result: dict[str, Any] | None = None
    crashed: str | None = None
    unavailable: str | None = None
    holds_slot: bool = False


@dataclass
class Ended:
    kind: str  # a failure kind: session_lost (closed), session_expired, shutdown
    reason: str
    result: dict[str, Any] | None = None


@dataclass
class Lookup:
    """What a session id names: the live `session`, else the `verified` result an ended session left (None when
    it ended unverified or never existed) and why there is no live session (`kind`, `reason`)."""

    session: Session | None
    verified: dict[str, Any] | None = None
    kind: str = ""
    reason: str = ""


class SessionStore:
    """Live sessions by id, capacity slots, idle expiry and tombstones (see the module docstring).

    Args:
        max_concurrent: unverified episodes at once.
        idle_timeout_s: end a session idle this long (None: never).
    """

    def __init__(self, max_concurrent: int, idle_timeout_s: float | None, key: bytes | None = None):
        self.max_concurrent, self.idle_timeout_s = max_concurrent, idle_timeout_s
        self._key = key or secrets.token_bytes(32)
        self.live: dict[str, Session] = {}
        self.ended: OrderedDict[str, Ended] = OrderedDict()
        self.active = 0  # sessions holding a slot
        self._freed: asyncio.Event | None = None  # made in the serving loop (a store may outlive one loop)
        self._loop: asyncio.AbstractEventLoop | None = None

    def _event(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        if self._freed is None or self._loop is not loop:
            self._freed, self._loop = asyncio.Event(), loop
        return self._freed

    # ---- cookies ----
    def sign(self, sid: str) -> str:
        return f"{sid}.{hmac.digest(self._key, sid.encode(), 'sha256').hex()[:32]}"  # hmac.new's value, one C call

    def unsign(self, cookie: str | None) -> str | None:
        """The session id of a cookie value this process signed; None for a missing or foreign one."""
        if not cookie or "." not in cookie:
            return None
        sid = cookie.rpartition(".")[0]
        return sid if hmac.compare_digest(self.sign(sid), cookie) else None

    # ---- capacity ----
    async def acquire_slot(self, wait_s: float) -> bool:
        """Take a capacity slot, waiting up to `wait_s` seconds for one to free. Returns whether it got one."""
        deadline = time.monotonic() + wait_s
        while self.active >= self.max_concurrent:
            self.reap(time.monotonic())
            if self.active < self.max_concurrent:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            freed = self._event()
            freed.clear()
            try:
                await asyncio.wait_for(freed.wait(), timeout=min(left, 1.0))
            except TimeoutError:
                pass
        self.active += 1
        return True

    def release_slot(self, sess: Session) -> None:
        """Free `sess`'s slot (and its episode's resources); idempotent."""
        if sess.holds_slot:
            sess.holds_slot = False
            self.active -= 1
            if self._freed is not None:
                self._freed.set()
        if sess.episode is not None:
            try:
                sess.episode.close()
            except Exception:  # noqa: BLE001 - closing must not fail the request
                pass
            sess.episode = None  # a verified session keeps only its result

    # ---- sessions ----
    def new_sid(self) -> str:
        return secrets.token_urlsafe(18)

    def add(self, sess: Session) -> None:
        self.live[sess.sid] = sess

    def get(self, sid: str | None) -> tuple[Session | None, tuple[str, str]]:
        """The live session `sid` (touched), or None with (failure kind, reason)."""
        if sid is None:
            return None, (SESSION_LOST, "no valid session cookie (call /seed_session first; a cookie from before a "
                                        "server restart names no session)")  # fmt: skip
        sess = self.live.get(sid)
        if sess is None:
            ended = self.ended.get(sid)
            return None, ((ended.kind, ended.reason) if ended else (SESSION_LOST, "unknown session"))
        sess.last_seen = time.monotonic()
        return sess, ("", "")

    def lookup(self, sid: str | None) -> Lookup:
        """The live session `sid` (touched), or its tombstone's verify result and failure kind and reason: the one
        place a request finds "the session or its tombstone"."""
        sess, (kind, reason) = self.get(sid)
        if sess is not None:
            return Lookup(sess)
        tomb = self.ended.get(sid) if sid is not None else None
        return Lookup(None, tomb.result if tomb is not None else None, kind, reason)

    def end(self, sid: str, kind: str, reason: str) -> None:
        """End session `sid` (live or never seeded) and leave its tombstone; idempotent."""
        sess = self.live.pop(sid, None)
        if sess is not None:
            self.release_slot(sess)
        if sid not in self.ended:
            self.ended[sid] = Ended(kind, reason, sess.result if sess else None)
            while len(self.ended) > _TOMBSTONES:
                self.ended.popitem(last=False)

    def reap(self, now: float) -> int:
        """End sessions idle longer than `idle_timeout_s`; returns how many."""
        if self.idle_timeout_s is None:
            return 0
        old = [sid for sid, s in self.live.items() if now - s.last_seen > self.idle_timeout_s]
        for sid in old:
            self.end(sid, SESSION_EXPIRED, f"session expired (idle for more than {self.idle_timeout_s:g} s)")
        return len(old)

    def shutdown(self) -> None:
        for sid in list(self.live):
            self.end(sid, SHUTDOWN, "the resources server shut down")

    def stats(self) -> dict[str, int]:
        return {"live_sessions": len(self.live), "active_episodes": self.active}

