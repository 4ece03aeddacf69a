"""A listening socket inside a sandboxed server's network namespace, held by the proxy outside it.

The sandbox's network namespace has only its own loopback: the server reaches nothing of the user's.
Its way out is the proxy's relay (transport/egress.py), which must listen on that loopback. A socket
belongs to the namespace it was made in, wherever the process holding it lives; so a short-lived fork
of the proxy joins the namespace (and its owning user namespace, where the proxy's user holds every
capability: the sandbox is the proxy's child), makes the socket, passes it back over a socket pair
(SCM_RIGHTS) and exits. The proxy then accepts on it like any other listener. No helper binary (socat)
runs inside the sandbox, and no process stays behind.

bwrap's `--info-fd` names the namespace's first process as soon as it exists, and `--block-fd` holds
the server's command until the socket is there, so the server's first connection finds it. The address
is bound with IP_FREEBIND: the namespace's loopback may not be up yet when the socket is made.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1): the user namespace owning a namespace
IP_FREEBIND = 15
EGRESS_PORT = 3128  # the relay's port on the server's own loopback (its network namespace is its own)
BACKLOG = 128


def bwrap_child_pid(info_fd: int) -> int | None:
    """The pid bwrap's `--info-fd` names (written as soon as its namespaces exist, then closed), read to its
    end; the descriptor is closed. Read without the json module: the early start (transport/start_record.py)
    runs before anything heavy is loaded."""
    data = b""
    try:
        while chunk := os.read(info_fd, 4096):
            data += chunk
    finally:
        os.close(info_fd)
    marker = b'"child-pid":'
    at = data.find(marker)
    if at < 0:
        return None
    digits = data[at + len(marker) :].split(b",")[0].split(b"}")[0].strip()
    return int(digits) if digits.isdigit() else None


class NamespaceError(OSError):
    """The listener could not be made in the sandbox's network namespace; the message says which step."""


def listener_in(pid: int, port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:`port` in the network namespace of process `pid`."""
    libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's setns (find_library runs ldconfig)
    ours = os.stat("/proc/self/ns/net").st_ino
    theirs = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(theirs).st_ino == ours:
            raise NamespaceError(f"process {pid} shares the proxy's network namespace: it is not sandboxed")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        forked = os.fork()
        if forked == 0:  # pragma: no cover - the child reports through the pair and exits
            _make_and_send(libc, theirs, port, child)
        child.close()
        try:
            message, fds, _flags, _address = socket.recv_fds(parent, 4096, 1)
        finally:
            parent.close()
            os.waitpid(forked, 0)
    finally:
        os.close(theirs)
    if not fds:
        raise NamespaceError(message.decode("utf-8", "replace") or "the helper that makes it exited")
    return socket.socket(fileno=fds[0])


def _make_and_send(libc: ctypes.CDLL, netns: int, port: int, back: socket.socket) -> None:
    """In the fork: join the namespaces, listen, send the socket back; never returns."""
    code = 1
    try:
        userns = fcntl.ioctl(netns, NS_GET_USERNS)
        joins = [(netns, CLONE_NEWNET, "network")]
        if os.fstat(userns).st_ino != os.stat("/proc/self/ns/user").st_ino:  # (root's bwrap makes none)
            joins.insert(0, (userns, CLONE_NEWUSER, "user"))
        for fd, kind, name in joins:
            if libc.setns(fd, kind) != 0:
                error = ctypes.get_errno()
                raise NamespaceError(error, f"joining the sandbox's {name} namespace: {os.strerror(error)}")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(BACKLOG)
        socket.send_fds(back, [b"ok"], [listener.fileno()])
        code = 0
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            back.sendall(str(exc).encode("utf-8", "replace")[:4000] or type(exc).__name__.encode())
    finally:
        os._exit(code)
