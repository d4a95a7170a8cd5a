"""TCP port checks shared by every server and the launcher: fail at once, naming the port and its holder.

(The reference system hung forever when vLLM's port was taken; every prime-rl server checks before binding.)
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", ""}


class PortInUseError(RuntimeError):
    """The TCP port a server should bind is taken (the message names the port and the holding process)."""


def port_free(host: str, port: int) -> bool:
    """Whether a listening TCP socket can be bound to `(host, port)` right now.

    Uses SO_REUSEADDR, as uvicorn and vLLM do, so a port in TIME_WAIT counts as free. Takes milliseconds.
    """
    family = socket.AF_INET6 if ":" in (host or "") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError:
            return False
    return True


def port_holder(port: int) -> str:
    """`pid 123 (python -m vllm...)` for the process listening on `port`, or a hint when it cannot be seen."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, PermissionError):
        conns = []
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            if conn.pid is None:
                return "a process of another user (run `ss -ltnp` as root to see it)"
            try:
                proc = psutil.Process(conn.pid)
                cmd = _shorten(proc.cmdline()) or proc.name()
            except psutil.Error:
                cmd = "?"
            return f"pid {conn.pid} ({cmd})"
    return "an unknown process (see `ss -ltnp`)"


def _shorten(argv: list[str], width: int = 160) -> str:
    """A command line cut between arguments at about `width` characters; the cut says how many arguments it left
    out."""
    out = ""
    for i, word in enumerate(argv):
        if out and len(out) + 1 + len(word) > width:
            return f"{out} ... ({len(argv) - i} more argument(s))"
        out = f"{out} {word}" if out else word
    return out


def check_port_free(host: str, port: int, field: str = "server.port") -> None:
    """Raise PortInUseError naming the port, the holding process and the config `field` to change."""
    if not port_free(host, port):
        raise PortInUseError(
            f"port {port} on {host} is already in use by {port_holder(port)}; stop it or choose another port "
            f"({field} / --{field.replace('_', '-')})"
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free now (bind to port 0). Racy by nature: for tests and torchrun's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def url_host_port(url: str) -> tuple[str, int]:
    """`http://127.0.0.1:9100/x` -> ("127.0.0.1", 9100); default ports 80/443 by scheme."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return (parsed.hostname or "", port)


def is_local(host: str) -> bool:
    """Whether `host` names this machine's loopback (a server the launcher may start itself)."""
    return host in LOCAL_HOSTS


def names_this_machine(host: str) -> bool:
    """Whether `host` (a name or an address) reaches this machine: loopback, or an address it resolves to can be
    bound here (a socket binds only to the machine's own addresses). False when it does not resolve."""
    if is_local(host):
        return True
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return False
    for family, _, _, _, address in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((address[0], 0))
            except OSError:
                continue
            return True
    return False
