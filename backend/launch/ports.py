"""Rendezvous ports: pick a free one, or tell before launch that a fixed one is taken (and by whom)."""

from __future__ import annotations

import errno
import os
import socket

# Where torch's TCPStore may listen: it binds all interfaces (IPv6 dual-stack where available), while other jobs
# may hold the port on loopback only. A port is free for a run only if every one of these binds succeeds.
_CHECKED_ADDRESSES: tuple[tuple[socket.AddressFamily, str], ...] = (
    (socket.AF_INET, "127.0.0.1"),
    (socket.AF_INET, "0.0.0.0"),
    (socket.AF_INET6, "::"),
)


def port_in_use(port: int) -> bool:
    """True when a listener (or a non-shareable bind) holds `port` on loopback or on any interface."""
    for family, address in _CHECKED_ADDRESSES:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host
            continue
        try:
            # TCPStore sets SO_REUSEADDR too: connections lingering in TIME_WAIT must not count as "in use".
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            # EADDRNOTAVAIL and the like: this address does not exist here, so nothing can hold it.
        finally:
            sock.close()
    return False


def pick_free_port(attempts: int = 20) -> int:
    """A port that is free on all interfaces right now (the kernel's choice, double-checked with port_in_use)."""
    port = 0
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("0.0.0.0", 0))
            port = sock.getsockname()[1]
        if not port_in_use(port):
            return port
    return port


def port_holder(port: int) -> str | None:
    """'pid 1234 (python train.py ...)' for the process listening on `port`, when psutil may tell; else None."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in connections:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            try:
                proc = psutil.Process(conn.pid)
                command = " ".join(proc.cmdline()) or proc.name()
            except (psutil.Error, OSError):
                return f"pid {conn.pid}"
            if len(command) > 120:
                command = command[:117] + "..."
            return f"pid {conn.pid} ({command})"
    return None


def busy_port_message(port: int) -> str:
    if port < 1024 and hasattr(os, "geteuid") and os.geteuid() != 0:
        return f"port {port} is a privileged port (below 1024): choose a port from 1024 to 65535, or leave it unset"
    holder = port_holder(port)
    held = f" by {holder}" if holder else ""
    return (f"port {port} is already in use{held}: stop that process, or leave the port unset so traindeck picks "
            "a free one")
