"""The warm start: a proxy forked, its modules already loaded, from a start server of the user's.

A proxy loads its modules for ~120 ms before it can relay a byte, where a byte relay takes ~20 ms. For a
server that starts faster than that (a Go or Rust binary) the proxy is the wait, even when its server is
spawned early (transport/early_start.py). So the first launch that finds none starts a warm server
(`start_server`): a process of the user's that loads the modules once and then forks, for each later launch,
a proxy ready to run. Launches that come while it starts (a host starts its servers together) wait for it
(`launch`) rather than each load the modules on the same few cores. The launch (`hand_over`, the first thing
a server's command line does after hardening) passes it what makes the launch: stdin, stdout, stderr and the
working directory (descriptors, over a Unix socket), the command line, the environment and the umask. It
forwards the host's stop signals to the forked proxy and exits with its status.

A forked proxy is a fresh start in all that can differ:
- the interpreter (its file, flags, sys.path, version), the user and groups, the namespaces, the cgroup (a
  desktop's scope: a warm server dies with the app that started it), the resource limits, the priority,
  no_new_privs, the seccomp filters, the capability sets, the signals ignored and blocked, the security
  label and root, the CPUs and scheduling policy, the OOM score, the personality, the audit login and the
  locale and PYTHON* variables are each launch's: they name the socket (`identity`), and a warm server checks
  that it was started under the name it serves;
- the modules: a warm server runs no proxy once one of its module files has changed (stamps, asked with
  each fork: the fork runs only once they are found the same); it exits, and the launch starts as usual;
- the configuration, the policy and every key are read after the fork: a warm server reads none, and drops
  a launch's environment once it has forked.

A launch's controlling terminal is handed over too: a forked proxy, in a session of its own, has none, and
asks its approvals there through it. It stays cold (the usual start): off Linux, with no private runtime
directory (`folder`), and with MCP_SAMPLING_PROXY_WARM_START=off. The socket lives in the runtime
directory, which is the user's alone and hidden from sandboxed servers; the warm server is non-dumpable (it
holds each launch's environment until it forks); each end checks that the other is this user
(SO_PEERCRED).

Lean on purpose, as entry.py: a launch that finds no warm server has paid one stat.
"""

from __future__ import annotations

import contextlib
import os
import sys

from mcp_sampling_proxy.system.hardening import cmdline, peer_credentials  # (every path here loads it: the prctl's)

TYPE_CHECKING = False  # (typing's costs an import this module is lean without)
if TYPE_CHECKING:
    import _socket
    import socket
    from collections.abc import Callable, Mapping
    from typing import Literal, NoReturn

    SeenState = Literal["none", "serving", "silent", "stuck"]

ENV = "MCP_SAMPLING_PROXY_WARM_START"
RUNTIME_ENV = "MCP_SAMPLING_PROXY_RUNTIME_DIR"  # as approval/console/server.py reads it
APP_DIR = "mcp-sampling-proxy"
FOLDER = "warm"
SERVER_FLAG = "--warm-start-server"  # entry.py's: the warm server's own command line
WARM_COMM = "mcp-proxy-warm"  # what `ps -e` shows for the warm start server (its forks take the relay's name)
IDLE_SECONDS = 30 * 60  # a warm server no launch used for this long exits
POLL_SECONDS = 1.0  # how often an idle warm server looks whether its socket is still its own
SETTLE_SECONDS = 0.5  # a new warm server waits this long before loading: the launch that started it goes first
# (unless another launch waits for it: a host that starts its servers together)
LATER_SECONDS = 0.25  # a warm server that has listened this long with no launch loads the rest (`serve`)
WAIT_SECONDS = 3.0  # a launch that finds its warm server loading waits this long for it, then starts cold
READY_SECONDS = 2.0  # a warm server that has not said "ready" by then is passed over: the launch starts cold
PID_SECONDS = 10.0  # after the hand-over, the forked proxy's first word
MAX_REQUEST = 1 << 20  # a launch's command line and environment
_HANDED = ("stdin", "stdout", "stderr", "cwd", "terminal")  # the last when the launch has one
_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")
_LOCALE = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES")
# /proc/PID/status's lines a fork would take from its warm server: what may be gained and done, and the signals
# ignored and blocked (exec keeps both: what a host ignores, as a shell's background job SIGQUIT, its server does)
_LIMITS = (b"NoNewPrivs:", b"Seccomp", b"Cap", b"SigBlk:", b"SigIgn:")
# what a warm server's own environment keeps: what names its key, and where the user's directories are
_KEPT = (*_LOCALE, "PATH", "HOME", "TMPDIR", "TZ", "XDG_RUNTIME_DIR", RUNTIME_ENV, ENV)
_BOOT = "import json, sys; sys.path[:] = json.loads(sys.argv[5]); from mcp_sampling_proxy.entry import main; main()"


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether this launch may use or start a warm server (see the module's docstring)."""
    if not sys.platform.startswith("linux"):
        return False
    return environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


def _terminal() -> int | None:
    """The launch's controlling terminal, opened (a forked proxy has none of its own: it asks there through
    this descriptor), or None."""
    try:
        found = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:  # stderr is that terminal: its own device, so that the proxy can tell (system/terminal.py)
        os.tcgetpgrp(2)
        device = os.open(os.ttyname(2), os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return found
    os.close(found)
    return device


def folder(environ: Mapping[str, str], run_root: str = "/run/user") -> str | None:
    """Where the warm servers' sockets are: `warm` in the proxy's runtime directory, found as the console's
    is (config/dirs.py), and so hidden from sandboxed servers: MCP_SAMPLING_PROXY_RUNTIME_DIR, else in
    XDG_RUNTIME_DIR, else in /run/user/UID (a desktop host's short environment often lacks the variable).
    None when there is none of the user's own: the console's last resort, in /tmp, is not one."""
    explicit = environ.get(RUNTIME_ENV, "")
    if explicit:
        base = explicit
    else:
        # one open to others is passed over, as the console's sockets pass it over (nothing is made in it)
        candidates = (environ.get("XDG_RUNTIME_DIR", ""), os.path.join(run_root, str(os.getuid())))
        runtime = next((found for found in candidates if found and _users_own(found)), None)
        if runtime is None:
            return None
        base = os.path.join(runtime, APP_DIR)
    return os.path.join(base, FOLDER) if os.path.isabs(base) else None


def _users_own(path: str) -> bool:
    """A runtime directory as the XDG spec has it: this user's, and no one else's to read or write."""
    try:
        return _alone(os.stat(path))
    except OSError:
        return False


def _alone(found: os.stat_result, *, others: int = 0o077) -> bool:
    """A directory of this user's that no one else may do `others` (read, write or enter: 0o077) in."""
    import stat  # start-up: a launch with a runtime directory

    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and found.st_mode & others == 0


def private(path: str) -> bool:
    """The folder is this user's alone, and so is the one above it (nobody else could rename it away and put
    another in its place)."""
    try:
        found, above = os.lstat(path), os.lstat(os.path.dirname(path))
    except OSError:
        return False
    return _alone(found) and _alone(above, others=0o022)


class Seen:
    """What `doctor` finds of the warm server for launches like this one (`look`): `state` is "serving" (it
    said it is ready), "silent" (it took the connection and said nothing within READY_SECONDS: stopped or
    hung, each launch waits that long for it and then loads the proxy itself), "stuck" (it holds its lock and
    has not listened within WAIT_SECONDS: each launch waits that long for it) or "none"; `pid`, when known."""

    __slots__ = ("pid", "state")

    def __init__(self, state: SeenState, pid: int | None = None) -> None:
        self.state: SeenState = state
        self.pid = pid


def look(environ: Mapping[str, str]) -> Seen:
    """The warm server that serves launches like this one (this process's interpreter, limits and
    namespaces), as a launch would find it: for `doctor`, which may wait as long as a launch would."""
    place = folder(environ)
    if place is None:
        return Seen("none")
    import time  # (doctor's)

    key = identity(environ)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        seen = _answer(place, key)
        if seen is not None:
            return seen
        if not _lock_held(os.path.join(place, f"{key}.lock")):
            return Seen("none")
        if time.monotonic() >= deadline:  # (a new one settles and loads in well under a second)
            return Seen("stuck", _server_pid(place, key))
        time.sleep(0.05)


def _answer(place: str, key: str) -> Seen | None:
    """The warm server listening on `key`'s socket, as it answers; None when none listens."""
    import socket  # (doctor's)

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(READY_SECONDS)
        try:
            pid, said = _greeting(probe, place, key)
        except (_NotListening, OSError):
            return None
    if said == b"":
        return Seen("none")  # (a stranger's socket, or one ending as it was asked: no launch would be served)
    return Seen("serving" if said == b"ready" else "silent", pid)


def _lock_held(path: str) -> bool:
    """Whether a process holds the flock on `path` (/proc/locks). Read, not tried: a try of the lock would
    fail a launch's own try meanwhile. (The pid there is the one that took it: the launch that started the
    warm server, which has exited since, not the warm server that holds it now.)"""
    try:
        found = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return False
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    # ("->": a process waiting for the lock, not holding it)
    return any("FLOCK" in words and device in words and "->" not in words for words in map(str.split, lines))


def _server_pid(place: str, key: str) -> int | None:
    """The warm server of the user's started for `place` and `key`, by its command line (`start_server`'s:
    readable even for a non-dumpable process); None when there is none, or more than one."""
    uid = f"Uid:\t{os.getuid()}\t"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        words = cmdline(int(name))
        at = words.index(SERVER_FLAG) if SERVER_FLAG in words else -1
        if at < 0 or words[at + 1 : at + 3] != [place, key]:
            continue
        with contextlib.suppress(OSError), open(f"/proc/{name}/status", encoding="ascii", errors="replace") as status:
            if uid in status.read():
                found.append(int(name))
    return found[0] if len(found) == 1 else None


def identity(environ: Mapping[str, str]) -> str:
    """What a forked proxy must share with the launch it serves, as a name (the socket's)."""
    import resource  # start-up: a launch with a runtime directory
    import zlib  # start-up: as resource (hashlib's OpenSSL costs 4 ms; a name needs no collision resistance)

    parts: list[object] = [sys.version, sys.executable, repr(sys.flags), sys.path, sys.warnoptions]
    # '' (python -c) or a relative PYTHONPATH is read from the cwd (a path hook's marker, as an editable
    # install's, is no folder here: it is not)
    if any(not os.path.isabs(entry) and (entry == "" or os.path.isdir(entry)) for entry in sys.path):
        parts.append(os.getcwd())
    parts.append(sorted(sys._xoptions.items()))
    with contextlib.suppress(OSError):
        found = os.stat(sys.executable)
        parts.append((found.st_ino, found.st_mtime_ns, found.st_size))
    parts.append(sorted((k, v) for k, v in environ.items() if k.startswith("PYTHON") or k in _LOCALE))
    parts.append((os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())))
    for name in _NAMESPACES:
        with contextlib.suppress(OSError):
            parts.append(os.readlink(f"/proc/self/ns/{name}"))
    with contextlib.suppress(OSError), open("/proc/self/cgroup", "rb") as cgroup:
        parts.append(cgroup.read())
    # what limits what the proxy and its server may gain or do, which a fork takes from its warm server: a
    # host's no_new_privs (setpriv, systemd's NoNewPrivileges=), its seccomp filters, its capabilities, the
    # signals it ignores or blocks, its security label (AppArmor, SELinux), its root; and how the kernel
    # treats it: its OOM score, its personality (setarch), its CPUs and scheduling, its audit login
    with contextlib.suppress(OSError), open("/proc/self/status", "rb") as status:
        parts.append([line for line in status.read().splitlines() if line.startswith(_LIMITS)])
    for name in ("oom_score_adj", "personality", "loginuid", "sessionid", "attr/current"):  # (the last: the LSM's)
        with contextlib.suppress(OSError), open(f"/proc/self/{name}", "rb") as setting:
            parts.append(setting.read())
    with contextlib.suppress(OSError):  # a chroot; the CPUs it may run on (taskset); its scheduling (chrt)
        parts += [os.readlink("/proc/self/root"), sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0)]
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        with contextlib.suppress(OSError, ValueError):
            parts.append((name, resource.getrlimit(getattr(resource, name))))
    parts.append(os.getpriority(os.PRIO_PROCESS, 0))
    data = repr(parts).encode()
    return f"{zlib.crc32(data):08x}{zlib.crc32(data[::-1]):08x}{len(data):x}"


def _socket_path(place: str, key: str) -> str:
    return os.path.join(place, f"{key}.sock")


def _wanted_path(place: str, key: str) -> str:
    """Where a launch says it waits for the warm server of `key`, which is loading (`_loading`)."""
    return os.path.join(place, f"{key}.wanted")


def _address(folder_fd: int, name: str) -> str:
    """The address of the socket `name` through a descriptor of its folder: a Unix socket's path is limited
    to 107 bytes, and a runtime directory may lie deeper than that leaves room for."""
    return f"/proc/self/fd/{folder_fd}/{name}"


def _open_folder(place: str) -> int:
    return os.open(place, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


# --- the launch's side --------------------------------------------------------------------------------------


def where(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The folder of this launch's warm server and its name, or None when the warm start is not for it (off,
    or no runtime directory of the user's): asked once a launch, for `hand_over` and `start_server`."""
    if not enabled(environ):
        return None
    place = folder(environ)
    return None if place is None else (place, identity(environ))


def launch(
    argv: list[str],
    environ: Mapping[str, str],
    held: Callable[[], list[str]],
    found: tuple[str, str],
    asked: Callable[[], object],
) -> int | None:
    """Run this launch as a proxy forked by its warm server (`hand_over`): its exit status, or None for the
    usual start. When none listens, one is started for the launches after this one (`start_server`); when
    another launch has just started it and it is loading its modules (a host that starts its servers
    together: their launches come within milliseconds), this launch waits for it (`_loading`) rather than
    load them too: one load on the host's cores instead of one a server; until the host `asked` it to stop
    (a stop signal held: the usual start then stops as a cold proxy does)."""
    # the socket as it is before the try: when no warm server takes the launch, it is a dead one's (killed, it
    # could not take it away) or none, and a socket made after it is a new one's (asked after the try, a new
    # one renamed into place in between would be taken for the dead one's, and waited past)
    gone = _made(_socket_path(*found))
    status, listened = hand_over(argv, environ, held, found)
    if status is not None:
        return status
    started = start_server(environ, found)
    if started is not False or listened or not _loading(*found, gone, lambda: start_server(environ, found), asked):
        return None  # (started here, or none can be; or one listened and passed this launch over)
    return hand_over(argv, environ, held, found)[0]


def _loading(
    place: str,
    key: str,
    gone: tuple[int, int] | None,
    start: Callable[[], bool | None],
    asked: Callable[[], object],
) -> bool:
    """Wait while the warm server whose lock is held has not listened yet (it settles, then loads); True once
    its socket is there (another than `gone`, a dead one's), False when it took longer than WAIT_SECONDS.
    One that ends first (the lock was an ending one's: it exits, killed, idle or upgraded) is replaced by
    `start`, start_server's try: False while another holds the lock (the wait goes on); True when it took
    it and started another, and None when none can be started (either way this launch loads the proxy
    itself: False); False too once the host `asked` this launch to stop. The `.wanted` file tells the warm
    server that a launch waits: it loads at once."""
    import time  # start-up: a launch whose warm server is starting

    with contextlib.suppress(OSError):
        # (O_NONBLOCK: something else put there, a FIFO, fails the open rather than hang the launch on it)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        os.close(os.open(_wanted_path(place, key), flags, 0o600))
    path = _socket_path(place, key)
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if _made(path) not in (None, gone):
            return True
        if asked() or start() is not False:  # (start: the lock's own test; a probe beside it would fail others')
            return False
        time.sleep(0.005)
    _passed_over(f"did not start listening within {WAIT_SECONDS:g} s", _server_pid(place, key))
    return False


def _passed_over(why: str, pid: int | None = None) -> None:
    """Tell the host's log that this launch waited for a warm server that made it wait (stopped or hung),
    which every launch will until it is ended: said once a launch, in the launch's first words."""
    who = f" (process {pid})" if pid else ""
    end = f"kill -KILL {pid}" if pid else f"pkill -KILL -x {WARM_COMM}"
    sys.stderr.write(
        f"mcp-sampling-proxy: the warm start server{who} {why} (stopped or hung?): this proxy starts without it, "
        f"and so will the next ones until it is ended (`{end}`; `mcp-sampling-proxy doctor` says more)\n"
    )


def _made(path: str) -> tuple[int, int] | None:
    """Which file `path` is: its inode and when it was made (a new socket may get a dead one's inode)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_ctime_ns


def hand_over(
    argv: list[str], environ: Mapping[str, str], held: Callable[[], list[str]], found: tuple[str, str]
) -> tuple[int | None, bool]:
    """Run this launch as a proxy forked by the warm server `found` (`where`): its exit status, once it has
    ended, or None when there is none, or it passed the launch over before it had anything (the usual start
    then runs); and whether a warm server listened. `held` gives the stop signals received so far, which the
    forked proxy is sent first."""
    place, key = found
    if not private(place) or not os.path.exists(_socket_path(place, key)):
        return None, False
    # start-up: a warm server is there. The C module: `socket` itself costs a launch 2-3 ms (its enum
    # classes), and the launch needs none of what it adds
    import _socket

    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        pid = _handed(connection, found, argv, environ)
        if pid is None:
            return None, True
        return _follow(connection, pid, held), True
    except _NotListening:
        return None, False
    except NotStarted as exc:
        sys.stderr.write(
            f"mcp-sampling-proxy: the warm start server took this launch and {exc}; set {ENV}=off to start "
            "without one\n"
        )
        return 1, True
    finally:
        connection.close()


class _NotListening(Exception):
    """No warm server listens on the socket (a dead one's, or none)."""


def _greeting(connection: _socket.socket, place: str, key: str) -> tuple[int, bytes | None]:
    """Connect `connection` (its timeout set: the wait) to the warm server of `key` and take its first word, as
    a launch and `doctor` both do: its pid and the word; b"" when it is not this user's (nothing is read from
    a stranger), None when it said nothing in time (stopped, hung). _NotListening when none listens; OSError
    for the rest."""
    folder_fd = _open_folder(place)
    try:
        connection.connect(_address(folder_fd, f"{key}.sock"))
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise _NotListening from exc
    finally:
        os.close(folder_fd)
    pid, uid = peer_credentials(connection)
    if uid != os.getuid():
        return pid, b""
    try:
        return pid, _line(connection)
    except TimeoutError:
        return pid, None


def _handed(
    connection: _socket.socket, where: tuple[str, str], argv: list[str], environ: Mapping[str, str]
) -> int | None:
    """Hand the launch over; the forked proxy's pid, or None when nothing was taken (start cold)."""
    import _socket  # start-up: loaded by hand_over

    connection.settimeout(READY_SECONDS)
    try:
        peer, said = _greeting(connection, *where)
        if said is None:
            _passed_over(f"did not answer within {READY_SECONDS:g} s", peer)
        if said != b"ready":
            return None
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    terminal = _terminal()
    umask = os.umask(0o077)
    os.umask(umask)
    payload = _encoded(_Launch(argv, sys.argv[0], dict(environ), umask))
    data = len(payload).to_bytes(4, "big") + payload
    try:
        handed = [0, 1, 2, cwd] if terminal is None else [0, 1, 2, cwd, terminal]
        descriptors = b"".join(fd.to_bytes(4, sys.byteorder) for fd in handed)  # C ints, as SCM_RIGHTS takes
        sent = connection.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, descriptors)])
    except OSError:
        return None  # nothing was taken (a closed stdio descriptor, the server gone)
    finally:
        os.close(cwd)
        if terminal is not None:
            os.close(terminal)
    connection.settimeout(PID_SECONDS)
    try:
        if sent < len(data):  # (a send of nothing to a peer that has read it all and gone fails: EPIPE)
            connection.sendall(data[sent:])
    except OSError:
        return None  # it went before it had the whole launch: nothing was forked
    # from here a forked proxy may hold the launch's stdio, and the launch goes cold only if none ever will:
    # a forked proxy says its pid before it does anything else, so a clean end with nothing said means none
    # ran. Anything else (silence, a broken line, another word) may be one that did: an error, never a cold
    # start beside it on the same pipes
    try:
        first = _line(connection)
    except TimeoutError as exc:
        raise NotStarted(f"its proxy did not start within {PID_SECONDS:.0f} s") from exc
    except OSError as exc:
        raise NotStarted(f"the connection broke before its proxy said its pid ({exc.strerror})") from exc
    if first == b"":
        return None
    if not (first.startswith(b"pid ") and first[4:].isdigit()):
        raise NotStarted("its proxy did not say its pid")
    return int(first[4:])


class NotStarted(Exception):
    """A warm server took the launch (its stdio) and no forked proxy said it runs."""


def _follow(connection: _socket.socket, pid: int, held: Callable[[], list[str]]) -> int:
    """Be the forked proxy's stand-in for the host: pass on its stop signals, exit with its status."""
    import signal  # start-up: a warm server is there

    connection.settimeout(None)
    try:
        handle = os.pidfd_open(pid)  # the proxy holds the connection open: it lives, and the pid is its own
    except OSError:
        return 1

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(handle, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    for name in held():
        forward(signal.Signals[name], None)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the host's pipes are the forked proxy's now: their end is its end alone
        os.dup2(devnull, fd)
    os.close(devnull)
    status = 1  # ended without a word: killed (the host sees a failed exit, as from a killed proxy)
    pending = b""
    while True:
        chunk = connection.recv(4096)
        if not chunk:
            break
        pending += chunk
        for line in pending.split(b"\n")[:-1]:
            if line.startswith(b"exit "):
                with contextlib.suppress(ValueError):
                    status = int(line[5:])
        pending = pending.rsplit(b"\n", 1)[-1]
    os.close(handle)
    return status


def _line(connection: _socket.socket, limit: int = 64) -> bytes:
    """One short line from the other end, or what came of it before its end (b"": nothing came)."""
    found = b""
    while not found.endswith(b"\n") and len(found) < limit:
        chunk = connection.recv(1)
        if not chunk:
            break
        found += chunk
    return found.rstrip(b"\n")


def start_server(environ: Mapping[str, str], found: tuple[str, str]) -> bool | None:
    """Start the warm server `found` (`where`) for launches like this one, when none runs or starts (a lock
    file says so: the warm server holds it while it lives). Forked twice, so that it is no child of this
    proxy, which becomes a subreaper and ends what it finds below itself when it stops. True when this
    launch started it, False when another holds the lock, None when none can be started. Never raises."""
    try:
        return _start_server(environ, *found)
    except Exception:
        return None


def _start_server(environ: Mapping[str, str], place: str, key: str) -> bool | None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(os.path.dirname(place), 0o700)
    with contextlib.suppress(FileExistsError):
        os.mkdir(place, 0o700)
    if not private(place):
        return None
    import fcntl  # start-up: a cold start with a runtime directory
    import json  # start-up: as fcntl
    import subprocess  # start-up: loaded by early_start already

    lock = os.open(os.path.join(place, f"{key}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return False
    env = {k: v for k, v in environ.items() if k in _KEPT or k.startswith("PYTHON")}
    words = [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", _BOOT]  # type: ignore[attr-defined]
    words += [SERVER_FLAG, place, key, str(lock), json.dumps(sys.path)]
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.set_inheritable(lock, True)
                os.closerange(3, lock)
                os.closerange(lock + 1, os.sysconf("SC_OPEN_MAX"))
                os.execve(sys.executable, words, env)
        finally:
            os._exit(0)
    os.close(lock)
    os.waitpid(pid, 0)
    return True


# --- the warm server's side ---------------------------------------------------------------------------------


def serve(
    args: list[str],
    *,
    load: Callable[[], None],
    load_later: Callable[[], None],
    code: Callable[[], object],
    libraries: Callable[[], object],
    run: Callable[[], int],
) -> int:
    """The warm server's life (its command line: SERVER_FLAG PLACE KEY LOCK-FD PATH, from `start_server`):
    `load` the modules a proxy's start needs, then fork a proxy for each launch, which sets up as the launch
    and calls `run`; once no launch has come for LATER_SECONDS, `load_later` what a proxy loads at its first
    request (its forks from then on find it loaded: a burst of launches waiting for this load does not wait
    for that one too). It ends when it is idle for IDLE_SECONDS, its socket is no longer its own, or the
    stamps of what it loaded change:
    `code`'s, the proxy's own modules (pairs of a file and its stamp), asked with each fork, which waits for
    them (no launch runs older code than is installed);
    `libraries`', every module file (a few hundred stats), asked after each fork and when idle (a library's
    upgrade reaches the launch after the one it raced)."""
    # the warm server's: a launch that finds none never needs them
    import gc
    import select
    import signal
    import socket
    import time

    place, key = args[0], args[1]
    _HERE.lock = int(args[2])  # held while it lives (start_server's test): never by what it forks
    if identity(os.environ) != key:
        return 1  # started under another interpreter or limits than its name says: it would fork a stranger
    wanted = _wanted_path(place, key)
    settled = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < settled and not os.path.exists(wanted):
        time.sleep(0.01)
    load()
    # what is loaded now is every fork's: out of the collector's sight, so that no fork's collection walks
    # it (writing to each object's header, and so copying the pages its fork shares)
    gc.collect()
    gc.freeze()
    started = (code(), libraries())
    later = True  # `load_later` still to do
    os.chdir("/")  # not the first launch's folder for half an hour (a drive it keeps from being unmounted)
    path = _socket_path(place, key)
    sweep(place, key)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    folder_fd = _open_folder(place)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{key}.new", dir_fd=folder_fd)  # a warm server's that died between these lines
        listener.bind(_address(folder_fd, f"{key}.new"))
        listener.listen(64)
        # in place once it listens (over a dead warm server's: the lock, which this one holds, is not): a
        # launch that finds it there can connect
        os.rename(f"{key}.new", f"{key}.sock", src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    finally:
        os.umask(umask)
        os.close(folder_fd)
    bound = _made(path)  # (after the rename, which is the last change of its ctime)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(wanted)  # those that waited see the socket
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked proxies are collected by the kernel
    used = time.monotonic()
    try:
        while True:
            if not select.select([listener], [], [], LATER_SECONDS if later else POLL_SECONDS)[0]:
                # an upgrade ends it within a poll: the launches after it may have another name (a new
                # interpreter, another sys.path) and never come to tell it
                if time.monotonic() - used > IDLE_SECONDS or not _still(path, bound) or libraries() != started[1]:
                    return 0
                if later:
                    later = False
                    load_later()
                    gc.collect()
                    gc.freeze()
                    now = code()
                    if not _extends(started[0], now):  # what was loaded first changed meanwhile
                        return 0
                    started = (now, libraries())  # what it loaded joins the stamps
                continue
            connection, _ = listener.accept()
            used = time.monotonic()
            if not _still(path, bound):
                connection.close()  # the launch starts cold (and a new warm server may start)
                return 0
            if not _serve_one(connection, listener, run, _unchanged(code, started[0])):
                return 0  # new code: the fork ended unseen, the launch starts cold
            if libraries() != started[1]:
                return 0
    finally:
        if not _HERE.forked and _still(path, bound):  # (a fork ends through here too: the socket is not its)
            with contextlib.suppress(OSError):
                os.unlink(path)


def sweep(place: str, key: str) -> list[str]:
    """Take away what dead warm servers of other names left in the folder (a socket and a lock each, the
    socket one died making, and the mark of a launch that waited, named for an interpreter or a sys.path no
    launch may use again): a lock nobody holds is a dead server's. The
    names of those taken away."""
    import fcntl  # the warm server's: loaded by then

    swept = []
    for name in os.listdir(place):
        other, dot, kind = name.rpartition(".")
        if kind != "lock" or not dot or other == key:
            continue
        try:
            lock = os.open(os.path.join(place, name), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock)  # held: its warm server lives (or is starting)
            continue
        try:  # unlinked while held: a launch that opened it meanwhile holds a lock of a name nobody reads
            for dead in (f"{other}.sock", f"{other}.new", f"{other}.wanted", name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(place, dead))
            swept.append(other)
        finally:
            os.close(lock)
    return swept


def _extends(before: object, after: object) -> bool:
    """Whether the stamps `after` (pairs of a file and its stamp) hold each of `before` as it was."""
    return isinstance(before, tuple) and isinstance(after, tuple) and set(before) <= set(after)


def _unchanged(code: Callable[[], object], stamped: object) -> Callable[[], bool]:
    """Whether `code`'s stamps are still `stamped` (asked while a fork sets up)."""
    return lambda: code() == stamped


def _still(path: str, bound: tuple[int, int] | None) -> bool:
    """Whether the socket at `path` is still the one this warm server made (`_made`: a new one may have
    its inode)."""
    return bound is not None and _made(path) == bound


def _serve_one(
    connection: socket.socket, listener: socket.socket, run: Callable[[], int], current: Callable[[], bool]
) -> bool:
    """Fork a proxy for the launch on `connection`. The stamps of the code (`current`, a few hundred stats)
    are asked after the fork, while the fork sets up as the launch: it runs only once they are the same, and
    else ends without a word, and the launch starts cold. False when they were not."""
    fds: list[int] = []
    try:
        launcher, uid = peer_credentials(connection)
        if uid != os.getuid():
            return True
        connection.settimeout(READY_SECONDS)
        connection.sendall(b"ready\n")
        request = _request(connection, fds)
        if request is None:
            return True
        verdict, say = os.pipe()
        try:
            forked = os.fork()
        except OSError:
            os.close(verdict)
            os.close(say)
            raise
        if forked == 0:  # (its SystemExit passes through here: no handler of this frame's may catch it)
            os.close(say)
            _forked(connection, listener, request, fds, run, verdict, launcher)
        os.close(verdict)
        try:
            same = current()
            with contextlib.suppress(OSError):  # (the fork already gone: it ran nothing; the launch starts cold)
                os.write(say, b"1" if same else b"0")  # (a pipe's buffer takes the byte at once)
        finally:
            os.close(say)
        return same
    except OSError:
        return True
    finally:
        connection.close()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class _Launch:
    """A launch as handed over: its command line, environment and umask (its descriptors come beside)."""

    __slots__ = ("argv", "argv0", "env", "umask")

    def __init__(self, argv: list[str], argv0: str, env: dict[str, str], umask: int) -> None:
        self.argv, self.argv0, self.env, self.umask = argv, argv0, env, umask


def _request(connection: socket.socket, fds: list[int]) -> _Launch | None:
    # the warm server's: a launch that finds none never needs them
    import array
    import socket
    import time

    size = array.array("i").itemsize
    data, ancillary, flags, _address = connection.recvmsg(65536, socket.CMSG_SPACE(len(_HANDED) * size))
    for level, kind, item in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(item[: len(item) - len(item) % size])
            fds.extend(received)
    if flags & socket.MSG_CTRUNC or len(fds) not in (len(_HANDED) - 1, len(_HANDED)) or len(data) < 4:
        return None
    length = int.from_bytes(data[:4], "big")
    if length > MAX_REQUEST:
        return None
    # the whole request within READY_SECONDS, not each piece: a peer that sends a byte now and then would
    # hold the warm server (it serves one launch at a time) for as long as it liked
    deadline = time.monotonic() + READY_SECONDS
    payload = bytearray(data[4:])
    while len(payload) < length:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        connection.settimeout(left)
        try:
            chunk = connection.recv(min(65536, length - len(payload)))
        except TimeoutError:
            return None
        if not chunk:
            return None
        payload += chunk
    return _decoded(bytes(payload))


def _encoded(launch: _Launch) -> bytes:
    """A launch as NUL-separated words (no word of a command line or an environment holds a NUL)."""
    words = [launch.argv0, str(launch.umask), str(len(launch.argv)), *launch.argv]
    words += [f"{name}={value}" for name, value in launch.env.items()]
    return b"\0".join(map(os.fsencode, words))


def _decoded(payload: bytes) -> _Launch | None:
    words = [os.fsdecode(word) for word in payload.split(b"\0")]
    try:
        argv0, umask, count = words[0], int(words[1]), int(words[2])
    except (IndexError, ValueError):
        return None
    if count < 0 or len(words) < 3 + count or not 0 <= umask <= 0o777:
        return None
    argv, pairs = words[3 : 3 + count], words[3 + count :]
    if not all("=" in pair for pair in pairs):
        return None
    return _Launch(argv, argv0, dict(pair.split("=", 1) for pair in pairs), umask)


def _forked(
    connection: socket.socket,
    listener: socket.socket,
    launch: _Launch,
    fds: list[int],
    run: Callable[[], int],
    verdict: int,
    launcher: int,
) -> NoReturn:
    """The forked proxy: become the launch, say the pid, run, say the status; then end as a process that ran
    the proxy's command line ends (SystemExit: the interpreter's own exit, its atexit handlers run and its
    threads waited for). The connection stays open until the process is gone, so the launch ends after it.
    Before its first word, the warm server's `verdict` on its code: anything but b"1" (new code, or the warm
    server gone) and it ends at once, having said nothing: the launch starts cold. `launcher`: the launch's
    pid (SO_PEERCRED, as the warm server read it)."""
    import signal  # the warm server's: loaded by `serve` already

    status = 1
    try:
        listener.close()
        if _HERE.lock >= 0:  # else a proxy that outlives its warm server keeps a new one from starting
            os.close(_HERE.lock)
            _HERE.lock = -1
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
        os.fchdir(fds[3])
        if len(fds) == len(_HANDED):
            from mcp_sampling_proxy.system.terminal import ask_on  # loaded by the warm server

            terminal = os.dup(fds[4])  # not inherited by what the proxy starts (os.dup's is not)
            ask_on(terminal)
        for fd in fds:
            os.close(fd)
        fds.clear()
        os.umask(launch.umask)
        os.environ.clear()
        os.environ.update(launch.env)
        sys.argv = [launch.argv0, *launch.argv]
        _show_the_command_line_of(launcher)
        _HERE.forked = True
        if os.read(verdict, 1) != b"1":
            os._exit(0)  # nothing run, nothing said (and none of the warm server's exit handlers)
        os.close(verdict)
        connection.settimeout(None)
        connection.sendall(f"pid {os.getpid()}\n".encode())
        _die_with_the_launch(connection)
        status = run()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback  # only for a proxy that failed unexpectedly

        traceback.print_exc()
    with contextlib.suppress(OSError):
        connection.sendall(f"exit {status}\n".encode())
    connection.detach()  # (the warm server's frames this passes through close it otherwise)
    raise SystemExit(status)


def _show_the_command_line_of(launcher: int) -> None:
    """What `ps` and `pgrep -f` show for the forked proxy: its launch's command line (the process the host
    started), not the warm server's, which names no server and would make a `pkill -f` of the warm server's
    flag end every proxy it forked."""
    from mcp_sampling_proxy.system.hardening import show_command_line  # the warm server's: loaded by then

    # (readable for any process; a launch gone is this proxy's end too, at its next look: _die_with_the_launch)
    with contextlib.suppress(OSError), open(f"/proc/{launcher}/cmdline", "rb") as found:
        show_command_line(found.read())


def _die_with_the_launch(connection: socket.socket) -> None:
    """A launch killed outright (SIGKILL: a host's force-quit) kills its forked proxy outright, as it would
    have killed a cold one: the launch's end of the connection closes, the kernel signals SIGIO (O_ASYNC), and
    an end of file there means the launch is gone (it holds the connection open until the proxy ends, and
    says nothing more). The group guard then stops the server, as for a cold proxy killed outright."""
    import fcntl  # the warm server's: loaded by then
    import signal  # as fcntl
    import socket  # as fcntl

    def gone(_signum: int, _frame: object) -> None:
        try:
            peeked = connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            peeked = b""
        if not peeked:
            os.kill(os.getpid(), signal.SIGKILL)

    signal.signal(signal.SIGIO, gone)
    fd = connection.fileno()
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    gone(signal.SIGIO, None)  # (the launch may have gone before the signal was armed)


class _Here:
    __slots__ = ("forked", "lock")

    def __init__(self) -> None:
        self.forked = False
        self.lock = -1  # the warm server's lock (its descriptor), in the warm server


_HERE = _Here()


def forked() -> bool:
    """Whether this proxy was forked by a warm server (for the start's log line)."""
    return _HERE.forked
