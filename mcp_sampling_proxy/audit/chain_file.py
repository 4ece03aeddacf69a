"""The hash-chained, append-only audit file, shared by every proxy that writes it.

`ChainFile` is the structlog "logger" of an `AuditLog` (recorder.py), and does what a structlog
renderer cannot: under an exclusive `fcntl.flock` on the sidecar `FILE.lock` (shared by every proxy
writing the file, and not moved by rotation), it reads the current last hash from the file's tail
(another proxy may have appended since; tail.py), seals a torn tail, rotates when the file would
grow past `max_bytes`, sets `seq`, `prev_hash` and `hash`, and appends the line with a single
`os.write` on an `O_APPEND` descriptor (file created 0600). With `audit.fsync: true` (the default)
a thread of its own (`_Syncer`) then `fsync`s the file while the answer is on its way, at most every
10 ms (records written in a busy stretch share one fsync); with `before_answer` the write returns
only after its fsync; `false` never fsyncs.
The lock keeps the chain linear across processes and lines from interleaving, whatever their
size; the single write means a crash leaves at most a torn last line, which the next writer (or
the next proxy start) seals. Rotation keeps every file: FILE.N -> FILE.N+1, FILE -> FILE.1.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import orjson

from mcp_sampling_proxy.audit.log_place import lock_path
from mcp_sampling_proxy.audit.records import GENESIS, AuditRecord, record_hash, rotated_name, utc_now
from mcp_sampling_proxy.audit.tail import (
    MAX_RECORD_BYTES,
    TAIL_SEARCH_BYTES,
    TAIL_SEARCH_LINES,
    digest_range,
    file_hash,
    read_tail,
)
from mcp_sampling_proxy.config.settings import FSYNC_BEFORE_ANSWER
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.system.shared_files import lock_within

log = get_logger("mcp_sampling_proxy.audit.chain_file")

LOCK_WAIT = 30.0  # s a write waits for another writer's lock (sealing a large foreign tail takes seconds)
SYNC_INTERVAL = 0.01  # s; audit.fsync: true fsyncs at most this often, a record at most this long after its write
_NOT_GIVEN: Any = object()


class AuditError(RpcError):
    """The audit record could not be written; the request is answered with this instead."""

    def __init__(self, message: str):
        super().__init__(jsonrpc.INTERNAL_ERROR, message)


class ChainFile:
    """The structlog "logger" of an AuditLog: appends chained lines to one file, safely shared."""

    def __init__(self, path: str, proxy_id: str, *, fsync: bool | str, max_bytes: int):
        self.path = os.path.abspath(path)
        self.proxy_id = proxy_id
        self.fsync = bool(fsync)
        self._sync_inline = fsync == FSYNC_BEFORE_ANSWER
        self._syncer = _Syncer(self) if fsync is True else None
        self.max_bytes = max_bytes
        self.seq = 0
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._known: tuple[int, int, str | None] | None = None  # (inode, size, last hash) as this writer left it
        self._thread_lock = threading.Lock()  # flock does not exclude threads sharing the descriptor
        self._problem: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Open (creating 0600) and seal a torn tail left by a crash. Problems are logged, and every
        record then raises AuditError: the proxy still relays, but answers no sampling it cannot audit."""
        try:
            directory = os.path.dirname(self.path)
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=0o700, exist_ok=True)
            self._lock_fd = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with self._locked():
                fd = self._open()
                st = os.fstat(fd)
                fd, head = self._repair(fd, st.st_size, st.st_ino)
                st = os.fstat(fd)
                self._known = (st.st_ino, st.st_size, head)  # as this writer leaves it (see _as_left)
        except TimeoutError as exc:  # the first record takes the lock (and seals) instead
            log.warning(
                "another process holds the audit log's lock; the first record will check its end",
                path=self.path,
                error=str(exc),
            )
        except OSError as exc:
            self._problem = _describe(exc)
            log.error(
                "audit log unusable: sampling requests will be refused until it is fixed",
                path=self.path,
                error=self._problem,
            )

    def close(self) -> None:
        if self._syncer is not None:
            self._syncer.stop()  # what was written is on disk before the proxy exits
        with self._thread_lock:
            for fd in (self._fd, self._lock_fd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._lock_fd = None

    @property
    def unusable(self) -> str | None:
        """Why the file could not be opened at start (or a background fsync failed), or None."""
        if self._lock_fd is None:
            return self._problem or "closed"
        return self._syncer.problem if self._syncer is not None else None

    # -- the structlog logger method ----------------------------------------------------------
    def append(self, **record: Any) -> None:
        """structlog's logger method: `record` is what the recorder's processors finished."""
        with self._thread_lock:
            self._append_locked(cast(AuditRecord, record), blocking=True)

    def try_append(self, record: AuditRecord) -> bool:
        """Append without waiting: False (nothing written) when another thread or process holds the lock."""
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            return self._append_locked(record, blocking=False)
        finally:
            self._thread_lock.release()

    def _append_locked(self, record: AuditRecord, *, blocking: bool) -> bool:
        problem, lock_fd = self.unusable, self._lock_fd  # not opened, closed, or an fsync failed
        if problem is not None or lock_fd is None:
            raise AuditError(
                f"the proxy's audit log cannot be written ({problem or 'closed'}); "
                "the request is not answered without an audit record"
            )
        try:
            if not _flock(lock_fd, blocking, lock_path(self.path)):
                return False
            try:
                left = self._as_left() if not blocking else None
                if not blocking and left is None:
                    return False  # someone else wrote: reading their tail back is the worker thread's job
                if not self._append(record, left):
                    return False
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        except OSError as exc:
            problem = _describe(exc)
            log.error("audit record not written; the request gets an error", path=self.path, error=problem)
            raise AuditError(
                f"the proxy's audit log cannot be written ({problem}); the request is not "
                "answered without an audit record"
            ) from None
        return True

    def _as_left(self) -> os.stat_result | None:
        """The file's stat when it is as this writer left it (no other proxy wrote, nobody rotated or
        appended foreign bytes): then the append needs no tail to be read back, and may run on the
        event loop. Anything else (a torn or foreign tail can be as large as whoever wrote it chose)
        is done by the blocking path in a worker thread: None."""
        if self._fd is None or self._known is None:
            return None
        try:
            st = os.fstat(self._fd)
            same = self._known[:2] == (st.st_ino, st.st_size) and os.stat(self.path).st_ino == st.st_ino
        except OSError:
            return None
        return st if same else None

    def dup_fd(self) -> int | None:
        """A duplicate of the current descriptor, for the fsync thread (the writer may swap the original)."""
        with self._thread_lock:
            return os.dup(self._fd) if self._fd is not None else None

    def _append(self, record: AuditRecord, left: os.stat_result | None = None) -> bool:
        """`left`: the file's stat, when `_as_left` just found it as this writer left it (on the event
        loop). False, with nothing written, when the record would start a rotation there: renames, an
        fsync and reading the rotated file's tail are the worker thread's job."""
        if left is not None and self._fd is not None:
            fd, st = self._fd, left
        else:
            fd = self._open()
            st = os.fstat(fd)
        fd, head = self._repair(fd, st.st_size, st.st_ino)
        unchanged = self._known is not None and self._known[:2] == (st.st_ino, st.st_size)
        size = st.st_size if unchanged else os.fstat(fd).st_size  # sealed, or a new file: look again
        line, last_hash = self._finish(record, head or GENESIS, self.seq + 1)
        if self.max_bytes and size > 0 and size + len(line) > self.max_bytes:
            if left is not None:
                return False
            fd = self._rotate()
            size = 0
        if size > 0:
            self._write(fd, line, self.seq + 1, last_hash)
            return True
        if left is not None:  # a new file's first record links to the rotated one: its tail is read
            return False
        line, last_hash = self._finish(record, *self._start_of_file())
        self._write(fd, line, self.seq + 1, last_hash)
        return True

    def _start_of_file(self) -> tuple[str, int, str | None]:
        """(prev_hash, seq, continues) of the first record of a new file: it links to the rotated file."""
        previous = rotated_name(self.path, 1)
        link = file_hash(previous)
        return link or GENESIS, self.seq + 1, os.path.basename(previous) if link else None

    def _finish(self, record: AuditRecord, prev_hash: str, seq: int, continues: Any = _NOT_GIVEN) -> tuple[bytes, str]:
        chain = {"ts": utc_now(), "seq": seq, "proxy_id": self.proxy_id}
        entry = {**chain, **record, **chain}  # the chain's keys first, and never a caller's value for them
        for key in ("continues", "prev_hash", "hash"):
            entry.pop(key, None)
        if continues is not _NOT_GIVEN:  # the first record of a file
            entry = {**{k: v for k, v in entry.items() if k in chain or k == "event"}, "continues": continues, **entry}
        entry["prev_hash"] = prev_hash
        entry["hash"] = chained = record_hash(entry)
        try:  # the line is only parsed back (verify re-hashes the values), so orjson's spelling is as good
            line = orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # what orjson does not write (a lone surrogate, nesting past 254, a huge int)
            text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, default=str)
            line = text.encode("utf-8", "surrogatepass") + b"\n"
        if len(line) > MAX_RECORD_BYTES:  # it could not be read back as a record
            raise AuditError(
                f"the audit record would be {len(line):,} bytes, over the audit log's limit of "
                f"{MAX_RECORD_BYTES:,} (set audit.content to none, or lower the size caps); the "
                "request is not answered without an audit record"
            )
        return line, chained

    def _write(self, fd: int, data: bytes, seq: int, last_hash: str) -> None:
        written = os.write(fd, data)
        while written < len(data):  # a short write (e.g. a full disk): finish it or raise, under the lock
            written += os.write(fd, data[written:])
        self._synced(fd)
        self.seq = seq
        st = os.fstat(fd)
        self._known = (st.st_ino, st.st_size, last_hash)

    def _repair(self, fd: int, size: int, ino: int) -> tuple[int, str | None]:
        """(the descriptor to write to, the hash to chain from); first seals bytes after the last good
        record (a torn write), or moves the file aside when no record is within reach (`_move_aside`).
        `size` and `ino`: the file's, from the caller's fstat."""
        if self._known is not None and self._known[:2] == (ino, size):
            return fd, self._known[2]
        tail = read_tail(fd, size)
        if not tail.searched_all:
            return self._move_aside(), None
        if tail.needs_newline:
            self._write_raw(fd, b"\n")
            return fd, tail.last_hash
        if tail.good_end == size:
            return fd, tail.last_hash
        # what is sealed is the bytes after the last record plus the newline added, hashed as read
        sha, first_newline = digest_range(fd, tail.good_end, size)
        newline = b"" if os.pread(fd, 1, size - 1) == b"\n" else b"\n"
        sha.update(newline)
        torn_bytes = size - tail.good_end + len(newline)
        reason = (
            "the last line was incomplete: a write was cut short (crash or full disk)"
            if first_newline in (-1, size - 1)
            else "the bytes after the last record are not chained records"
        )
        seal: AuditRecord = {
            "event": "seal",
            "torn_offset": tail.good_end,
            "torn_bytes": torn_bytes,
            "torn_sha256": sha.hexdigest(),
            "newline_added": bool(newline),
            "reason": reason,
        }
        if tail.last_hash is None:  # nothing good in the file: the seal is its first record
            line, seal_hash = self._finish(seal, *self._start_of_file())
        else:
            line, seal_hash = self._finish(seal, tail.last_hash, self.seq + 1)
        self._write(fd, newline + line, self.seq + 1, seal_hash)
        log.warning(
            "audit log had a torn or foreign tail; sealed it",
            path=self.path,
            torn_bytes=torn_bytes,
            offset=tail.good_end,
        )
        return fd, seal_hash

    def _move_aside(self) -> int:
        """The file's tail held no record within read_tail's bounds (bytes some other program appended):
        it cannot be sealed without knowing the hash to link to, so the file is rotated away as it is
        (nothing is deleted; `audit verify` on it shows where the foreign bytes start) and a new chain
        begins. Returns the new file's descriptor."""
        log.error(
            "the audit log's end holds no record this proxy can link to (bytes written by another "
            "program running as this user?); moved it aside and started a new chain",
            path=self.path,
            moved_to=rotated_name(self.path, 1),
            searched_bytes=TAIL_SEARCH_BYTES,
            searched_lines=TAIL_SEARCH_LINES,
        )
        return self._rotate()

    def _write_raw(self, fd: int, data: bytes) -> None:
        os.write(fd, data)
        self._synced(fd)

    def _synced(self, fd: int) -> None:
        """fsync what was just written now (`before_answer`), or soon in the fsync thread (true)."""
        if self._sync_inline:
            os.fsync(fd)
        elif self._syncer is not None:
            self._syncer.request()

    def _rotate(self) -> int:
        """FILE.N -> FILE.N+1 ..., FILE -> FILE.1; a new FILE. Nothing is ever deleted."""
        count = 1
        while os.path.exists(rotated_name(self.path, count)):
            count += 1
        for index in range(count - 1, 0, -1):
            os.rename(rotated_name(self.path, index), rotated_name(self.path, index + 1))
        if self._syncer is not None and self._fd is not None:
            os.fsync(self._fd)  # the rotated file is complete on disk before a new one starts
        os.rename(self.path, rotated_name(self.path, 1))
        self._sync_directory()
        log.info("audit log rotated", path=self.path, rotated_to=rotated_name(self.path, 1))
        return self._open()

    def _open(self) -> int:
        """The descriptor of the file now at `path` (reopened after another proxy rotated it)."""
        if self._fd is not None:
            try:
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    return self._fd
            except FileNotFoundError:
                pass
            if self._syncer is not None:
                os.fsync(self._fd)  # another proxy rotated the file: what we wrote to it is on disk
            os.close(self._fd)
            self._fd = None
        created = not os.path.exists(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if created:
            self._sync_directory()
        return self._fd

    def _sync_directory(self) -> None:
        if not self.fsync:
            return
        dir_fd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        except OSError as exc:  # some file systems cannot fsync a directory
            if exc.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(dir_fd)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        assert self._lock_fd is not None
        _flock(self._lock_fd, True, lock_path(self.path))
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)


def _flock(fd: int, blocking: bool, path: str) -> bool:
    """Take the exclusive lock; without `blocking`, False when another process holds it. Blocking,
    it waits at most LOCK_WAIT (TimeoutError): anyone running as the user can hold it."""
    if blocking:
        lock_within(fd, LOCK_WAIT, path)
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class _Syncer:
    """fsyncs the audit file soon after each write, in a thread of its own, so the answer does not
    wait for the disk. At most one fsync per `SYNC_INTERVAL`: a lone record is fsync'd at once,
    and records written in a busy stretch share an fsync (an fsync costs ~0.15 ms here, ~60 us of
    it CPU, more than the proxy's own work for a request). A failed fsync makes the log unusable
    (`problem`): later requests are refused, as for a failed write."""

    def __init__(self, file: ChainFile):
        self._file = file
        self._wake = threading.Condition()
        self._dirty = False
        self._stopping = False
        self._last = 0.0  # time.monotonic() of the last fsync
        self._thread: threading.Thread | None = None
        self.problem: str | None = None

    def request(self) -> None:
        with self._wake:
            if self._dirty:  # an fsync is already due: it will cover this write too (no wake-up, no GIL hand-over)
                return
            self._dirty = True
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="audit-fsync", daemon=True)
                self._thread.start()
            self._wake.notify()

    def stop(self) -> None:
        """Finish: the last writes are fsync'd before this returns."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        if self._dirty:  # no thread ran (or it gave up waiting): sync here
            self._dirty = False
            self._sync()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._dirty and not self._stopping:
                    self._wake.wait()
                if not self._dirty:
                    return
                while not self._stopping and (delay := self._last + SYNC_INTERVAL - time.monotonic()) > 0:
                    self._wake.wait(delay)  # gather the records of a busy stretch into one fsync
                self._dirty = False
            self._sync()
            self._last = time.monotonic()

    def _sync(self) -> None:
        fd = self._file.dup_fd()
        if fd is None:
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            self.problem = f"fsync failed: {_describe(exc)}"
            log.error(
                "audit log could not be flushed to disk: the last records may be lost on a power failure; "
                "sampling requests will be refused until the proxy is restarted",
                path=self._file.path,
                error=self.problem,
            )
        finally:
            os.close(fd)


def _describe(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
