"""The record of a sandboxed start, and the early start it allows: the server spawned before the proxy's
slow imports.

A proxy reaches its server's spawn ~100 ms after it starts: the interpreter, msgspec and PyYAML load, the
policy is parsed, the sandbox planned. A byte relay spawns in ~20 ms. The server's own start (hundreds of
milliseconds for most) then adds to the proxy's instead of running beside it.

After a start that sandboxed its server, the proxy writes a record (`starts/` in the state directory, one
file per start key): the bwrap words and variables the plan gave, the server's command, the names of the
variables withheld from it, the policy file's digest, and every filesystem fact the plan was made from,
as the plan's code met them (`FactLog`: which paths exist, their type, mode and owner, where links lead,
which directories a directory holds, which directories were made). The start key covers everything else the plan
depends on: the command line, the whole environment, the working directory, the user, the interpreter
and the proxy's version. The record is sealed with the state key (quotas/integrity.py), as remembered
approvals are: a sandboxed server cannot see the state directory; one that ran unconfined could forge a
seal (docs/security.md).

At the next start with the same key (`attempt`, the first thing `entry.main` does, with nothing heavy
loaded), the seal is checked, the policy file read and digested, and every fact looked at again, in
order, directories made as then. When all of them read as they did, the plan's code would take the same
path to the same plan: the server is spawned at once under it. Anything else, and nothing is started
here. The usual start then runs as always: it plans again, and `taken` gives it the early server only
when the plan it made is the record's (else the early server is stopped and a new one spawned).

Lean on purpose: this module imports only what a byte relay would, and marshal, hashlib and hmac.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import marshal
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

from mcp_sampling_proxy import __version__
from mcp_sampling_proxy.config.child_env import child_environment
from mcp_sampling_proxy.system.hardening import die_with_parent

TYPE_CHECKING = False  # (typing's costs an import this module is lean without)
if TYPE_CHECKING:
    import socket
    import subprocess

RECORD_FORMAT = 1
RECORDS_DIR = "starts"
KEEP_RECORDS = 64  # the most recently written; older ones are removed
MAX_RECORD_BYTES = 4 * 1024 * 1024
SEAL_KIND = b"start-record\0"
STATE_KEY_FILE = "integrity.key"  # quotas/integrity.py's KEY_FILE
STATE_KEY_BYTES = 32
MAX_POLICY_BYTES = 16 * 1024 * 1024  # config/policy_file.py's

Fact = tuple[str, tuple[object, ...], object]  # (operation, its arguments, what it gave, normalised)


# -- facts: what the plan's code asked of the filesystem --------------------------------------------------


def _stat(path: str, follow: bool) -> object:
    try:
        found = os.stat(path, follow_symlinks=follow)
    except OSError as exc:
        return ("err", exc.errno)
    return ("ok", found.st_mode, found.st_uid)


def _readlink(path: str) -> object:
    try:
        return ("ok", os.readlink(path))
    except OSError as exc:
        return ("err", exc.errno)


def _entries(entries: Iterable[os.DirEntry[str]]) -> tuple[object, ...]:
    """A listing's directories and links, as the plan's scans read it (the git scan of write grants walks
    directories only): the files a server writes in its grants do not make the next start plan afresh."""
    seen = []
    for entry in entries:
        link = entry.is_symlink()
        if not link and not entry.is_dir(follow_symlinks=False):
            continue
        kind = (entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False), link)
        followed = (entry.is_dir(), entry.is_file()) if link else ()
        seen.append((entry.name, kind, followed))
    return tuple(sorted(seen))


def _scandir(path: str) -> object:
    try:
        with os.scandir(path) as entries:
            return ("ok", _entries(entries))
    except OSError as exc:
        return ("err", exc.errno)


def _listdir(path: str) -> object:
    try:
        return ("ok", tuple(sorted(os.listdir(path))))
    except OSError as exc:
        return ("err", exc.errno)


def _access(path: str, mode: int) -> object:
    return os.access(path, mode)


def _mkdir(path: str, mode: int) -> object:
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return ("ok",)
    except OSError as exc:
        return ("err", exc.errno)
    return ("ok",)


_LOOKS: dict[str, Callable[..., object]] = {
    "stat": _stat,
    "readlink": _readlink,
    "scandir": _scandir,
    "listdir": _listdir,
    "access": _access,
    "mkdir": _mkdir,
    "getcwd": os.getcwd,
}


def facts_hold(facts: Sequence[Fact]) -> bool:
    """Every fact, looked at again in order (directories made as then), reads as it did."""
    for operation, arguments, seen in facts:
        look = _LOOKS.get(operation)
        if look is None or look(*arguments) != seen:
            return False
    return True


class FactLog:
    """What the plan's code asks of the filesystem while `recording`: each question and its answer, as
    `facts_hold` asks it again. Patches `os` for the while (posixpath, shutil, pathlib and platformdirs
    call through it); a question it cannot repeat (a file descriptor, `dir_fd`, another thread) spoils the
    log, and a spoiled log writes no record."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.spoiled = False

    @contextlib.contextmanager
    def recording(self) -> Iterator[FactLog]:
        import threading  # start-up: loaded by then (the bwrap probe's subprocess)

        main = threading.get_ident()
        originals = {name: getattr(os, name) for name in ("stat", "lstat", "readlink", "scandir", "listdir")}
        originals |= {name: getattr(os, name) for name in ("access", "getcwd", "mkdir")}

        def path_of(value: object) -> str | None:
            if threading.get_ident() != main:
                return None
            if isinstance(value, int):  # a descriptor: not a path a later start could look at
                self.spoiled = True
                return None
            try:
                found = os.fspath(value)  # type: ignore[call-overload]
            except TypeError:
                self.spoiled = True
                return None
            if isinstance(found, bytes):
                self.spoiled = True
                return None
            return str(found)

        def note(operation: str, arguments: tuple[object, ...], seen: object) -> None:
            self.facts.append((operation, arguments, seen))

        def spoil_on(kwargs: dict[str, object], *allowed: str) -> None:
            if any(key not in allowed and value is not None for key, value in kwargs.items()):
                self.spoiled = True

        def stat_(path: object, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
            named = path_of(path) if dir_fd is None else None
            if dir_fd is not None:
                self.spoiled = True
            try:
                found = originals["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
            except OSError as exc:
                if named is not None:
                    note("stat", (named, follow_symlinks), ("err", exc.errno))
                raise
            if named is not None:
                note("stat", (named, follow_symlinks), ("ok", found.st_mode, found.st_uid))
            return found  # type: ignore[no-any-return]

        def lstat_(path: object, *, dir_fd: int | None = None) -> os.stat_result:
            return stat_(path, dir_fd=dir_fd, follow_symlinks=False)

        def readlink_(path: object, *, dir_fd: int | None = None) -> str:
            named = path_of(path) if dir_fd is None else None
            if dir_fd is not None:
                self.spoiled = True
            try:
                target = originals["readlink"](path, dir_fd=dir_fd)
            except OSError as exc:
                if named is not None:
                    note("readlink", (named,), ("err", exc.errno))
                raise
            if named is not None:
                note("readlink", (named,), ("ok", target))
            return target  # type: ignore[no-any-return]

        def scandir_(path: object = ".") -> _Listed:
            named = path_of(path)
            try:
                with originals["scandir"](path) as entries:
                    listed = list(entries)
            except OSError as exc:
                if named is not None:
                    note("scandir", (named,), ("err", exc.errno))
                raise
            if named is not None:
                note("scandir", (named,), ("ok", _entries(listed)))
            return _Listed(listed)

        def listdir_(path: object = ".") -> list[str]:
            named = path_of(path)
            try:
                names = originals["listdir"](path)
            except OSError as exc:
                if named is not None:
                    note("listdir", (named,), ("err", exc.errno))
                raise
            if named is not None:
                note("listdir", (named,), ("ok", tuple(sorted(names))))
            return names  # type: ignore[no-any-return]

        def access_(path: object, mode: int, **kwargs: object) -> bool:
            spoil_on(kwargs)
            named = path_of(path)
            allowed = bool(originals["access"](path, mode, **kwargs))
            if named is not None:
                note("access", (named, mode), allowed)
            return allowed

        def getcwd_() -> str:
            here = str(originals["getcwd"]())
            if threading.get_ident() == main:
                note("getcwd", (), here)
            return here

        def mkdir_(path: object, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
            named = path_of(path) if dir_fd is None else None
            if dir_fd is not None:
                self.spoiled = True
            try:
                originals["mkdir"](path, mode, dir_fd=dir_fd)
            except FileExistsError:
                if named is not None:
                    note("mkdir", (named, mode), ("ok",))
                raise
            except OSError as exc:
                if named is not None:
                    note("mkdir", (named, mode), ("err", exc.errno))
                raise
            if named is not None:
                note("mkdir", (named, mode), ("ok",))

        patched = {"stat": stat_, "lstat": lstat_, "readlink": readlink_, "scandir": scandir_}
        patched |= {"listdir": listdir_, "access": access_, "getcwd": getcwd_, "mkdir": mkdir_}
        for name, replacement in patched.items():
            setattr(os, name, replacement)
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(os, name, original)


class _Listed:
    """`os.scandir`'s entries, read whole, behind the same interface (iterated, used as a context)."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self._entries = entries

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        return iter(self._entries)

    def __enter__(self) -> _Listed:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def close(self) -> None:
        return None


# -- the record -------------------------------------------------------------------------------------------


def start_key(argv: Sequence[str], environ: dict[str, str], cwd: str) -> str:
    """What names a start: its command line, whole environment, working directory, user, interpreter and
    the proxy's version (a digest: the environment holds secrets)."""
    inputs = (
        RECORD_FORMAT,
        __version__,
        sys.executable,
        tuple(argv),
        cwd,
        os.geteuid(),
        tuple(sorted(environ.items())),
    )
    return hashlib.sha256(marshal.dumps(inputs)).hexdigest()


def state_directory(environ: dict[str, str]) -> str | None:
    """The state directory as config/dirs.py finds it on Linux (None when it would take a way this does not
    follow: then there is no early start)."""
    explicit = environ.get("MCP_SAMPLING_PROXY_STATE_DIR")
    if explicit:
        found = os.path.expanduser(explicit)
        return found if os.path.isabs(found) else None
    home = environ.get("HOME")
    if not home or not os.path.isabs(home):
        return None
    xdg = environ.get("XDG_STATE_HOME", "").strip()
    base = xdg if xdg else os.path.join(home, ".local", "state")
    return os.path.join(base, "mcp-sampling-proxy") if os.path.isabs(base) else None


def _read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes (no link followed at its last part), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size > limit:
            return None
        data = b""
        while chunk := os.read(fd, limit + 1 - len(data)):
            data += chunk
            if len(data) > limit:
                return None
        return data
    finally:
        os.close(fd)


def _seal(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, SEAL_KIND + payload, hashlib.sha256).digest()


def policy_digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


class Record:
    """What a sandboxed start decided, and what it was decided from."""

    __slots__ = ("command", "env", "facts", "hidden", "key", "policy", "policy_digest", "relayed", "words")

    def __init__(
        self,
        *,
        key: str,
        policy: str | None,
        policy_digest: str | None,
        facts: Sequence[Fact],
        words: Sequence[str],
        env: Sequence[tuple[str, str]],
        command: Sequence[str],
        hidden: Iterable[str],
        relayed: bool,
    ) -> None:
        self.key, self.policy, self.policy_digest = key, policy, policy_digest
        self.facts = tuple(facts)
        self.words, self.env, self.command = tuple(words), tuple(env), tuple(command)
        self.hidden = tuple(sorted(set(hidden)))
        self.relayed = relayed

    def payload(self) -> bytes:
        fields = {name: getattr(self, name) for name in self.__slots__}
        return marshal.dumps((RECORD_FORMAT, fields))

    def plans(
        self, words: Sequence[str], env: Sequence[tuple[str, str]], command: Sequence[str], hidden: Iterable[str]
    ) -> bool:
        """The plan made now is the one this record holds."""
        now = (tuple(words), tuple(env), tuple(command), tuple(sorted(set(hidden))))
        return now == (self.words, self.env, self.command, self.hidden)


def _load(payload: bytes) -> Record | None:
    """The record a sealed payload holds (its shape checked), else None."""
    try:
        found = marshal.loads(payload)  # sealed by a proxy: marshal is not for untrusted bytes
    except (EOFError, ValueError, TypeError):
        return None
    if not (isinstance(found, tuple) and len(found) == 2 and found[0] == RECORD_FORMAT and isinstance(found[1], dict)):
        return None
    fields = found[1]
    try:
        record = Record(**fields)
    except TypeError:
        return None
    strings = all(isinstance(w, str) for w in (*record.words, *record.command, *record.hidden))
    pairs = all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(v, str) for v in p) for p in record.env)
    facts = all(isinstance(f, tuple) and len(f) == 3 and isinstance(f[1], tuple) for f in record.facts)
    if not (strings and pairs and facts and record.words and record.command and isinstance(record.relayed, bool)):
        return None
    return record


def read_record(directory: str, key: str) -> Record | None:
    """The sealed record for `key` in the state directory, else None (none, unsealed, or another shape)."""
    state_key = _read_regular(os.path.join(directory, STATE_KEY_FILE), STATE_KEY_BYTES)
    if state_key is None or len(state_key) != STATE_KEY_BYTES:
        return None
    blob = _read_regular(os.path.join(directory, RECORDS_DIR, key), MAX_RECORD_BYTES)
    if blob is None or len(blob) <= 32:
        return None
    seal, payload = blob[:32], blob[32:]
    if not hmac.compare_digest(seal, _seal(state_key, payload)):
        return None
    record = _load(payload)
    return record if record is not None and record.key == key else None


def write_record(directory: str, state_key: bytes, record: Record) -> None:
    """Keep `record` (sealed, 0600, replaced whole), and only the KEEP_RECORDS most recent ones."""
    import tempfile  # start-up: after the server is spawned

    folder = os.path.join(directory, RECORDS_DIR)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    payload = record.payload()
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".new-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_seal(state_key, payload) + payload)
        os.replace(temporary, os.path.join(folder, record.key))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _prune(folder)


def forget_record(directory: str, key: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(directory, RECORDS_DIR, key))


def _prune(folder: str) -> None:
    with contextlib.suppress(OSError):
        kept = []
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                    kept.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
        for _when, path in sorted(kept)[: max(0, len(kept) - KEEP_RECORDS)]:
            os.unlink(path)


# -- the early start --------------------------------------------------------------------------------------


class Early:
    """A server started from its record, waiting for the usual start to take it (`taken`)."""

    __slots__ = ("child_pid", "info_read", "listener", "process", "record")

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        record: Record,
        info_read: int,
        child_pid: int | None,
        listener: socket.socket | None,
    ) -> None:
        self.process, self.record = process, record
        self.info_read, self.child_pid, self.listener = info_read, child_pid, listener


_STATE: dict[str, object] = {}  # "key", "directory": this start's; "early": the server started early


def attempt(argv: Sequence[str]) -> None:
    """Start the server now when the record of this start holds (see the module's docstring). Never
    raises: anything unexpected means the usual start."""
    try:
        _attempt(list(argv))
    except Exception:
        _STATE.pop("early", None)


def _attempt(argv: list[str]) -> None:
    if not sys.platform.startswith("linux") or "--" not in argv or not argv[0].startswith("-"):
        return  # a server's command line starts with the proxy's options or '--'; a subcommand never gets here
    environ = dict(os.environ)
    if not environ.get("XDG_RUNTIME_DIR") and not environ.get("MCP_SAMPLING_PROXY_RUNTIME_DIR"):
        return  # the runtime directory would be found by trying to write in /tmp: not a fact looked at again
    directory = state_directory(environ)
    if directory is None:
        return
    key = start_key(argv, environ, os.getcwd())
    _STATE.update(key=key, directory=directory)
    record = read_record(directory, key)
    if record is None:
        return
    if record.policy is not None:
        text = _read_regular(record.policy, MAX_POLICY_BYTES)
        if text is None or hashlib.sha256(text).hexdigest() != record.policy_digest:
            return
    if not facts_hold(record.facts):
        return
    _STATE["early"] = _spawn(record, environ)


def _spawn(record: Record, environ: dict[str, str]) -> Early:
    import subprocess  # start-up: only when a record holds (a byte relay's import too)

    info_read, info_write = os.pipe()
    extra = ["--info-fd", str(info_write)]
    block_read = block_write = -1
    if record.relayed:
        block_read, block_write = os.pipe()
        extra += ["--block-fd", str(block_read)]
    passed = tuple(fd for fd in (info_write, block_read) if fd >= 0)
    env = {**child_environment(environ, record.hidden), **dict(record.env)}
    try:
        process = subprocess.Popen(
            [*record.words[:-1], *extra, record.words[-1], *record.command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            bufsize=0,
            preexec_fn=die_with_parent(),  # no thread exists yet
            pass_fds=passed,
        )
    except BaseException:
        for fd in (info_read, block_write):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in passed:
            os.close(fd)
    child_pid: int | None = None
    listener: socket.socket | None = None
    if record.relayed:
        from mcp_sampling_proxy.transport.netns import (  # start-up: relayed only
            EGRESS_PORT,
            bwrap_child_pid,
            listener_in,
        )

        try:
            child_pid = bwrap_child_pid(info_read)
            if child_pid is None:
                raise OSError(errno.ESRCH, "the sandbox did not start")

            listener = listener_in(child_pid, EGRESS_PORT)
            listener.set_inheritable(False)
            os.write(block_write, b"1")
        except BaseException:
            _stop(process)
            raise
        finally:
            os.close(block_write)
        info_read = -1
    return Early(process, record, info_read, child_pid, listener)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End an early server nobody took: its process group, at once (it has been sent nothing)."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def taken(
    words: Sequence[str], env: Sequence[tuple[str, str]], command: Sequence[str], hidden: Iterable[str]
) -> Early | None:
    """The early server, for the usual start whose plan is its record's; an early server started from a
    record that no longer plans the same is stopped (the record is forgotten), and None is returned."""
    early = _STATE.pop("early", None)
    if not isinstance(early, Early):
        return None
    if early.record.plans(words, env, command, hidden) and early.process.poll() is None:
        _STATE["adopted"] = True
        return early
    _drop(early)
    _STATE["stale"] = True
    directory = _STATE.get("directory")
    if isinstance(directory, str):
        forget_record(directory, early.record.key)
    return None


def discard() -> None:
    """Stop an early server the usual start did not take (it failed before its spawn)."""
    early = _STATE.pop("early", None)
    if isinstance(early, Early):
        _drop(early)


def _drop(early: Early) -> None:
    _stop(early.process)
    if early.listener is not None:
        early.listener.close()
    if early.info_read >= 0:
        os.close(early.info_read)


def this_start() -> tuple[str, str] | None:
    """(key, state directory) of this process's start, when `attempt` named it (the entry point ran)."""
    key, directory = _STATE.get("key"), _STATE.get("directory")
    return (key, directory) if isinstance(key, str) and isinstance(directory, str) else None


def outcome() -> str | None:
    """How this start went: "early" (the server started from its record), "stale" (started, then stopped:
    the plan had changed), or None."""
    if _STATE.get("adopted"):
        return "early"
    return "stale" if _STATE.get("stale") else None
