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
import functools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator

TYPE_CHECKING = False  # (typing, pathlib and socket would cost the first milliseconds, before the prctl)
if TYPE_CHECKING:
    import _socket
    import socket
    from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
_PROC = "/proc"


def _proc(pid: int, name: str) -> bytes:
    with open(f"{_PROC}/{pid}/{name}", "rb") as found:
        return found.read()


def _prctl(option: int, arg: int | bytes = 0) -> int:
    value = ctypes.c_char_p(arg) if isinstance(arg, bytes) else ctypes.c_ulong(arg)
    return int(_libc_prctl()(option, value, 0, 0, 0))


@functools.cache
def _libc_prctl() -> Any:
    """libc's prctl, resolved once: each `CDLL(None)` makes new ctypes types, ~10 us, and ~0.3 ms in a
    process just forked (a warm start's proxy: its pages copied as they are written), for each of the
    prctls a start makes. Resolved in the warm server, a fork finds it made (as the guard and a spawn's
    `preexec_fn`, which must not dlopen between fork and exec, do)."""
    return ctypes.CDLL(None, use_errno=True).prctl


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


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process instead of init, so they stay
    recognisable as the upstream's; True when it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        return False


PR_SET_PDEATHSIG = 1
GUARD_GRACE = 2.0  # s between SIGTERM and SIGKILL to the server's process group
GUARD_COMM = "mcp-proxy-guard"


class GroupGuard:
    """A small process that stops the server's whole process group if the proxy dies without
    doing so (SIGKILL, a crash). PDEATHSIG reaches only the server itself; what it started (npx's
    node, a worker pool) would run on. The guard waits on a pipe only the proxy holds: end of file
    means the proxy is gone, and the group gets SIGTERM, then SIGKILL. A proxy that stopped its
    server itself stands the guard down first (`stand_down`), so a group id used again later is
    never signalled. Linux only (elsewhere `start` returns None)."""

    def __init__(self, pid: int, write_fd: int):
        self.pid = pid
        self._fd: int | None = write_fd

    @classmethod
    def start(cls, pgid: int) -> GroupGuard | None:
        """Fork the guard for process group `pgid`. Call before any thread exists (as spawn does),
        and after `harden_process`: the guard holds the proxy's memory (its keys in the environment
        included) and is only as closed to a same-user server as the non-dumpable flag it inherits."""
        if not sys.platform.startswith("linux"):
            return None
        name_self = _resolved_prctl()  # looked up here: the forked guard must not dlopen
        read_fd, write_fd = os.pipe()  # not inherited by anything exec'd later
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            return None
        if pid == 0:  # the guard: touches nothing of the proxy's but the pipe
            try:
                _guard(pgid, read_fd, write_fd, name_self)
            finally:
                os._exit(0)
        os.close(read_fd)
        return cls(pid, write_fd)

    def stand_down(self) -> None:
        """The proxy stopped the group itself: the guard is killed before the pipe closes, so it signals
        nothing. SIGKILL rather than a message it reads: a same-user server can SIGSTOP the guard, and
        collecting a guard that never reads would hold the proxy's shutdown for good. It stays this
        proxy's child until collected here (the orphan reaper leaves it alone), so the pid is its own."""
        if self._fd is None:
            return
        deadline = time.monotonic() + GUARD_GRACE
        with contextlib.suppress(ChildProcessError, OSError):  # gone and collected already: nothing to kill
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):  # running and uncollected: the pid is still its
                os.kill(self.pid, signal.SIGKILL)
                while os.waitpid(self.pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
                    time.sleep(0.005)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = None


def _resolved_prctl() -> Any:
    """libc's prctl, resolved in the proxy, for the guard to name itself after the fork."""
    try:
        return _libc_prctl()
    except (OSError, AttributeError):
        return None


def _guard(pgid: int, read_fd: int, write_fd: int, prctl: Any) -> None:
    os.close(write_fd)
    # what `ps` shows (else the relay's name, inherited). prctl: /proc/self/comm is root's in a child of
    # a non-dumpable process, so writing it works only for root
    named = prctl is not None and prctl(PR_SET_NAME, ctypes.c_char_p(GUARD_COMM.encode()), 0, 0, 0) == 0
    if not named:
        with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm_file:
            comm_file.write(GUARD_COMM)
    os.setsid()  # out of the host's process group: a host that signals the proxy's group leaves the guard be
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # never hold the host's pipes (it waits for their end) or the server's
        os.dup2(devnull, fd)
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, os.sysconf("SC_OPEN_MAX"))
    with contextlib.suppress(OSError):
        os.read(read_fd, 1)  # returns at end of file: the proxy is gone (a proxy that stops the group kills us)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + GUARD_GRACE
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def die_with_parent() -> Callable[[], None] | None:
    """For the upstream's `preexec_fn`: it gets SIGKILL when the proxy dies, however the proxy
    dies. A proxy killed outright (a host force-quitting it, SIGKILL) runs no clean-up, and a server
    that ignores EOF and SIGTERM would otherwise run on with nobody to stop it. None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the proxy died before the signal was armed
            os._exit(1)

    return arm


def peer_credentials(sock: _socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of a connected Unix socket, as of its connect (Linux:
    SO_PEERCRED). By the C module alone: a warm start's launch asks it, and `socket` costs it 2-3 ms."""
    import _socket  # start-up: as the docstring says

    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
    return int.from_bytes(creds[0:4], sys.byteorder), int.from_bytes(creds[4:8], sys.byteorder)


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a connected Unix socket (as of connect)."""
    if sys.platform.startswith("linux"):
        return peer_credentials(sock)[0] or None
    import socket  # start-up: the first milliseconds are the prctl's (harden_process)
    import struct  # start-up: as socket

    local_peerpid = getattr(socket, "LOCAL_PEERPID", None)
    if local_peerpid is not None:  # macOS
        with contextlib.suppress(OSError):
            return int(struct.unpack("i", sock.getsockopt(0, local_peerpid, 4))[0]) or None
    return None


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc (None when the process is gone or /proc is unavailable)."""
    try:
        stat = _proc(pid, "stat")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
    fields = stat[stat.rfind(b")") + 2 :].split()
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
        raw = _proc(pid, "cmdline")
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


# --- recognising proxy relay processes ------------------------------------------------------------
# A relay marks itself with this process name (prctl PR_SET_NAME). Linux lets only a thread of the
# same process write /proc/PID/comm, and a non-dumpable process cannot be ptraced or have its
# memory (argv) rewritten by a same-user process, so a server below a relay can neither remove the
# mark nor rewrite the relay's command line to hide it. A process may put the mark on itself, but
# that only makes its own descendants refused.
RELAY_COMM = "mcp-sp-relay"
PR_SET_NAME = 15
_ENTRY_POINTS = ("mcp-sampling-proxy", "mcp_sampling_proxy")


def mark_relay() -> bool:
    """Name this process RELAY_COMM so approval sockets can tell its descendants apart."""
    return name_process(RELAY_COMM)


def name_process(name: str) -> bool:
    """What `ps -e` and `top` show for this process (its comm, at most 15 bytes); True when it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _prctl(PR_SET_NAME, name.encode()[:15]) == 0
    except (OSError, AttributeError):
        return False


def show_command_line(raw: bytes) -> bool:
    """Make `raw` (NUL-separated words, as /proc/PID/cmdline holds them) what `ps`, `top` and `pgrep -f` show
    as this process's command line, cut to the room the process started with; True when it took. It writes
    over the argument strings the kernel gave the process (their bounds are in /proc/self/stat), as
    setproctitle(3) does: Python keeps copies of them (sys.argv, sys.orig_argv), and nothing reads the
    originals once it runs. For a proxy forked by the warm start server, whose own would be the warm
    server's (system/warm_start.py)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fields = _proc(os.getpid(), "stat").rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: the 48th and 49th fields
    except (OSError, IndexError, ValueError):
        return False
    room = end - start
    if room <= 1 or not raw:
        return False
    words = raw.rstrip(b"\0")[: room - 1]
    ctypes.memmove(start, words + b"\0" * (room - len(words)), room)  # the last byte stays a NUL
    return True


def comm(pid: int) -> str | None:
    try:
        return _proc(pid, "comm").decode("utf-8", "replace").rstrip("\n")
    except OSError:
        return None


def is_relay(pid: int, subcommands: frozenset[str] = frozenset()) -> bool:
    """True for a running proxy relay: marked by name, or started as `mcp-sampling-proxy ...`,
    `python .../mcp-sampling-proxy ...` or `python -m mcp_sampling_proxy ...` with no helper
    subcommand next. Only those positions count, so a path that merely mentions the project
    (`uv run --directory ~/src/mcp-sampling-proxy pytest`) does not make a process a relay."""
    if comm(pid) == RELAY_COMM:
        return True
    argv = cmdline(pid)
    for index, word in enumerate(argv[:16]):
        entry = index <= 1 or argv[index - 1] == "-m"
        if entry and os.path.basename(word.rstrip("/")) in _ENTRY_POINTS:
            following = argv[index + 1] if index + 1 < len(argv) else ""
            return following not in subcommands
    return False


def relay_subcommands() -> frozenset[str]:
    from mcp_sampling_proxy.notation.vocabulary import SUBCOMMANDS  # start-up: typing, after the prctl

    return frozenset(SUBCOMMANDS)


def refusal(pid: int | None, *, own_pid: int | None = None) -> str | None:
    """Why a peer process must not answer approvals (None when it may).

    Refused: an unknown peer, one whose ancestry cannot be read, one below `own_pid` (our upstream
    and anything it started: the subreaper keeps double-forked daemons below us), and one below
    any other proxy relay (a server under proxy A must not approve proxy B's requests)."""
    if pid is None:
        return "the peer's process id is unknown (no SO_PEERCRED)"
    chain = ancestry(pid)
    if chain is None:
        return "the peer's process ancestry cannot be read"
    if own_pid is not None and own_pid in chain[1:]:
        return "the peer is a descendant of this proxy (the governed server or a process it started)"
    subcommands = relay_subcommands()
    for ancestor in chain[1:]:
        if is_relay(ancestor, subcommands):
            return f"the peer runs below proxy process {ancestor} (a governed server or a process it started)"
    return None


# --- reaping orphans ------------------------------------------------------------------------------
_WAITED_FOR: set[int] = set()  # children their starter waits for itself (a command provider's run): never an orphan's


@contextlib.contextmanager
def waiting_for(pid: int) -> Iterator[None]:
    """While the body runs, the child `pid` (started in a session of its own, as a server's orphans are)
    is its starter's to wait for: the orphan reaper never collects it (which would steal its exit status)
    and `end_strays` never ends it."""
    _WAITED_FOR.add(pid)
    try:
        yield
    finally:
        _WAITED_FOR.discard(pid)


def children(pid: int | None = None) -> list[int] | None:
    """Direct children of a process (None when /proc cannot tell)."""
    pid = pid or os.getpid()
    found: list[int] = []
    try:
        for task in os.listdir(f"{_PROC}/{pid}/task"):
            found += [int(p) for p in _proc(pid, f"task/{task}/children").split()]
    except (OSError, ValueError):
        return None
    return found


def reap_orphans(keep: set[int]) -> list[int]:
    """Collect exited orphans the subreaper inherited; return their pids.

    Only children in another session than ours are touched, and never those in `keep`: the
    upstream runs in its own session and is waited for by its Popen (reaping it here would steal
    its exit status), and processes we start ourselves (a URL opener) share our session. Orphans
    from the upstream's tree can never be in our session (a process cannot join another session)."""
    reaped: list[int] = []
    own_session = os.getsid(0)
    for child in children() or []:
        if child in keep or child in _WAITED_FOR:
            continue
        try:
            if os.getsid(child) == own_session:
                continue
            done, _status = os.waitpid(child, os.WNOHANG)
        except (ProcessLookupError, ChildProcessError, PermissionError):
            continue
        if done:
            reaped.append(done)
    return reaped


def _strays(keep: set[int]) -> list[int]:
    """Living children from the server's tree (another session than ours, not in `keep`): what it
    started and left behind, re-parented to us as its subreaper."""
    own_session = os.getsid(0)
    found = []
    for child in children() or []:
        if child in keep or child in _WAITED_FOR:
            continue
        try:
            if os.getsid(child) != own_session:
                found.append(child)
        except (ProcessLookupError, PermissionError):
            continue
    return found


async def end_strays(keep: set[int], grace: float = 0.3, limit: float = 3.0) -> int:
    """At shutdown, after the server's group is stopped: end whatever of its tree is left (a daemon
    that left the group with setpgid or setsid), SIGTERM and then, after `grace`, SIGKILL, until none
    is left or `limit` seconds pass; returns how many were ended. Each is our child, not yet collected,
    so its pid is its own; its grandchildren come to us as it dies, and the next round takes them.
    (Unconfined only: in the sandbox they die with its PID namespace.)"""
    import anyio  # start-up: hardening loads first (cli.main), anyio later

    if not sys.platform.startswith("linux"):
        return 0
    ended: set[int] = set()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        reap_orphans(keep)
        strays = _strays(keep)
        if not strays:
            break
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in strays:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            ended.update(strays)
            if sig == signal.SIGTERM:
                await anyio.sleep(grace)
                reap_orphans(keep)
                strays = _strays(keep)
        await anyio.sleep(0.02)
    return len(ended)


async def reap_orphans_forever(keep: set[int], interval: float = 1.0) -> None:
    """Reap inherited orphans every `interval` seconds, so no zombies pile up below us.

    Polled rather than driven by SIGCHLD: uvloop reserves that signal for itself, and one read of
    /proc/self/task/*/children a second costs next to nothing."""
    import anyio  # start-up: hardening loads first (cli.main), anyio later

    if not sys.platform.startswith("linux"):
        return
    while True:
        reap_orphans(keep)
        await anyio.sleep(interval)
