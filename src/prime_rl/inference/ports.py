"""Port checks before binding: fail at once, naming the port and the process holding it (DESIGN invariant 5)."""

from __future__ import annotations

import errno
import socket


class PortInUseError(RuntimeError):
    """The TCP port a server should bind is taken."""


def port_holder(port: int) -> str:
    """'pid N (name: cmdline)' of a process listening on `port`, or a hint when it cannot be seen."""
    try:
        import psutil

        for c in psutil.net_connections(kind="inet"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                try:
                    p = psutil.Process(c.pid)
                    return f"pid {c.pid} ({p.name()}: {' '.join(p.cmdline())[:200]})"
                except psutil.Error:
                    return f"pid {c.pid}"
    except Exception:  # noqa: BLE001 - best effort (AccessDenied on some systems)
        pass
    return "an unknown process (try `ss -ltnp` or `lsof -i :PORT`)"


def check_port_free(host: str, port: int) -> None:
    """Try to bind `host:port` (with SO_REUSEADDR, as uvicorn does, so a port in TIME_WAIT counts as free);
    raise PortInUseError naming the holding process if a socket is bound to it. Takes milliseconds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or "0.0.0.0", port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(
                    f"port {port} on {host} is already in use by {port_holder(port)}; stop it or choose another "
                    f"port (server.port / --server.port)"
                ) from None
            raise


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free right now (for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
