"""Process hardening against the server the proxy governs, which runs as the same user.

A same-user process can read another's `/proc/PID/environ` and `/proc/PID/mem`, attach a
debugger, or read a core dump, unless that process is non-dumpable. The proxy holds LLM keys
and decides approvals, so it makes itself non-dumpable before anything else (`harden_process`)
and becomes a child subreaper, so that every process its upstream starts, even a double-forked
daemon, stays below it in the process tree, where the approval socket can recognise it
(`peer_pid`, `ancestry`).

Linux only; elsewhere these are no-ops (see SECURITY.md for what that leaves open).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
import sys
from pathlib import Path

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_PROC = Path("/proc")


def _prctl(option: int, arg: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0))


def harden_process() -> list[str]:
    """Make this process non-dumpable (which also means no core dump); return what could not be done (for a log line).

    Non-dumpable on Linux means `/proc/PID/environ`, `mem`, `maps` and `fd` belong to root, and
    ptrace by a same-user process is refused, so a server cannot read the proxy's keys."""
    problems: list[str] = []  # (no RLIMIT_CORE change: the child would inherit it; non-dumpable already means no core)
    if sys.platform.startswith("linux"):
        try:
            if _prctl(PR_SET_DUMPABLE, 0) != 0:
                problems.append(f"prctl(PR_SET_DUMPABLE, 0) failed: errno {ctypes.get_errno()}")
        except (OSError, AttributeError) as exc:  # no libc prctl (unusual libc)
            problems.append(f"prctl unavailable: {exc}")
    return problems


def is_dumpable() -> bool | None:
    """The process's dumpable flag (None where it cannot be read)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return _prctl(PR_GET_DUMPABLE) != 0
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process instead of init, so they stay
    recognisable as the upstream's; True when it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        return False


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a connected Unix socket (as of connect)."""
    if sys.platform.startswith("linux"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _uid, _gid = struct.unpack("3i", creds)
        return pid or None
    local_peerpid = getattr(socket, "LOCAL_PEERPID", None)
    if local_peerpid is not None:  # macOS
        with contextlib.suppress(OSError):
            return int(struct.unpack("i", sock.getsockopt(0, local_peerpid, 4))[0]) or None
    return None


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc (None when the process is gone or /proc is unavailable)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def ancestry(pid: int, limit: int = 4096) -> list[int] | None:
    """`pid` and its ancestors up to pid 1 (None when the chain cannot be read: treat as unknown)."""
    chain = [pid]
    current = pid
    while current > 1 and len(chain) < limit:
        parent = parent_pid(current)
        if parent is None:
            return None
        if parent == 0:
            break
        chain.append(parent)
        current = parent
    return chain


def cmdline(pid: int) -> list[str]:
    """A process's argv (readable even for non-dumpable processes); [] when gone."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def proc_available() -> bool:
    return (_PROC / str(os.getpid()) / "stat").exists()
