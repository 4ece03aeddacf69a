"""Why a TCP address cannot be listened on, said so that the user knows what to do next.

`serve --listen` and `console --web --port` bind their port themselves: a port in use, a privileged
port or an address of another machine is an error of ours that names the way out (a port free now, the
command that shows who holds the port) instead of the bare "Address already in use".
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Callable


def listen_failure(host: str, port: int, exc: OSError, retry: Callable[[int], str]) -> str:
    """The message for `exc`, raised binding (`host`, `port`); `retry(port)` spells the option that asks
    for another port (`--listen 127.0.0.1:8766`)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    free = free_port(host)
    another = f"{retry(free)} is free now" if free else f"e.g. {retry(port + 1)}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: another program listens on port {port} ({holder_command(port)} shows "
            f"which); stop it, or choose another port: {another}"
        )
    if exc.errno == errno.EACCES and 0 < port < 1024:
        return f"cannot listen on {where}: ports below 1024 need privileges; choose a higher one: {another}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {where}: {host} is not an address of this machine; give one of its own "
            "(127.0.0.1: this machine only; 0.0.0.0: every interface)"
        )
    return f"cannot listen on {where}: {exc.strerror or exc}"


def free_port(host: str) -> int | None:
    """A port nothing listens on at `host` now, or None when none can be had there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    except OSError:
        return None


def holder_command(port: int) -> str:
    """The command that names the program listening on `port`, on this OS."""
    if sys.platform == "darwin":
        return f"`lsof -nP -iTCP:{port} -sTCP:LISTEN`"
    if sys.platform.startswith("win"):
        return f"`netstat -ano | findstr :{port}`"
    return f"`ss -ltnp 'sport = :{port}'`"
