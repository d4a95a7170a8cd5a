"""Bounded health waits of the launcher's children, with the launcher's errors (the polling itself is
`prime_rl.process.wait_for_http`, shared with the inference server)."""

from __future__ import annotations

from prime_rl.launcher.errors import ChildFailed, LaunchError
from prime_rl.process import Child, ChildExited, describe_exit, wait_for_http


def wait_healthy(url: str, child: Child | None, timeout_s: float, what: str, interval_s: float = 0.5) -> float:
    """Poll `GET url` until it answers 200; return the seconds waited.

    Raises:
        ChildFailed: `child` exited before becoming healthy (names it, its exit and the tail of its log).
        LaunchError: no 200 within `timeout_s` seconds (names the URL and the child's log).
    """
    from prime_rl.monitor.progress import Progress

    try:
        with Progress(f"starting {what}", total=round(timeout_s), unit="s (timeout)", show_eta=False) as bar:
            return wait_for_http(url, child, timeout_s, interval_s, on_tick=lambda t: bar.update(round(t)))
    except ChildExited as e:
        assert child is not None
        raise ChildFailed(child.name, e.code, child.log, child.tail(), f"before {url} became healthy") from None
    except TimeoutError:
        where = f"; see its log {child.log}" if child is not None else ""
        state = f" ({describe_exit(child.poll())})" if child is not None else ""
        raise LaunchError(
            f"{what} did not become healthy: no 200 from {url} within {timeout_s:.0f} s{state}{where}. "
            f"Raise `startup_timeout_s` if it is only slow."
        ) from None
