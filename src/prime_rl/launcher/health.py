"""Bounded health waits: poll an HTTP endpoint until it answers 200, the child dies, or the timeout passes."""

from __future__ import annotations

import time

import httpx

from prime_rl.launcher.errors import ChildFailed, LaunchError
from prime_rl.launcher.process import Child, describe_exit


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether `GET url` answers 200 within `timeout_s` seconds (any error counts as no)."""
    try:
        r = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def http_json(url: str, timeout_s: float = 2.0) -> dict | None:
    """`GET url` as a JSON object, or None on any error or non-object answer."""
    try:
        r = httpx.get(url, timeout=timeout_s)
        if r.status_code != 200:
            return None
        data = r.json()
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def wait_healthy(url: str, child: Child | None, timeout_s: float, what: str, interval_s: float = 0.5) -> float:
    """Poll `GET url` until it answers 200; return the seconds waited.

    Raises:
        ChildFailed: `child` exited before becoming healthy (names it, its exit and the tail of its log).
        LaunchError: no 200 within `timeout_s` seconds (names the URL and the child's log).
    """
    from prime_rl.monitor.progress import Progress

    with Progress(f"starting {what}", total=round(timeout_s), unit="s (timeout)", show_eta=False) as bar:
        return _wait(url, child, timeout_s, what, interval_s, bar)


def _wait(url: str, child: Child | None, timeout_s: float, what: str, interval_s: float, bar) -> float:
    t0 = time.monotonic()
    while True:
        if http_ok(url, timeout_s=min(2.0, max(0.2, interval_s * 4))):
            bar.update(round(time.monotonic() - t0))
            return time.monotonic() - t0
        if child is not None:
            code = child.poll()
            if code is not None:
                raise ChildFailed(child.name, code, child.log, child.tail(), f"before {url} became healthy")
        waited = time.monotonic() - t0
        bar.update(round(waited))
        if waited > timeout_s:
            where = f"; see its log {child.log}" if child is not None else ""
            state = f" ({describe_exit(child.poll())})" if child is not None else ""
            raise LaunchError(
                f"{what} did not become healthy: no 200 from {url} within {timeout_s:.0f} s{state}{where}. "
                f"Raise `startup_timeout_s` if it is only slow."
            )
        time.sleep(interval_s)
