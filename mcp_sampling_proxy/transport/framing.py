"""Newline-delimited JSON-RPC framing over pipes, with no per-message task switch.

The relay must add next to nothing per message, so bytes are read with asyncio pipe
protocols and each complete line is handed to a callback synchronously; writing is a
non-blocking `transport.write`. Splitting is linear in the input (a 5 MB line costs one
scan, not one rescan per chunk). Back-pressure: when a destination's buffer fills, the
source that feeds it is paused until it drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
import sys
import threading
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_LINE = 64 * 1024 * 1024
PIPE_SIZE = 1024 * 1024  # Linux's default cap for unprivileged processes (fs.pipe-max-size)
_F_SETPIPE_SZ = 1031

LineHandler = Callable[[bytes], None]


OversizeHandler = Callable[[int, bytes, bytes], None]  # (size, first bytes, last bytes) of a dropped line
HEAD_KEPT = 1024  # of an oversized line, enough of each end to find its id
TAIL_KEPT = 256


class LineReader(asyncio.Protocol):
    """Splits a byte stream into lines; calls `on_line` per line and `on_eof` once at the end.

    A line over `max_line` is dropped as it streams in (never buffered whole); `on_oversize` then
    gets its size and its first and last bytes, so the caller can answer the id it carries."""

    def __init__(
        self,
        on_line: LineHandler,
        on_eof: Callable[[], None],
        *,
        max_line: int = DEFAULT_MAX_LINE,
        on_oversize: OversizeHandler | None = None,
    ):
        self._on_line = on_line
        self._on_eof = on_eof
        self._max_line = max_line
        self._on_oversize = on_oversize
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._discarding = False  # inside an oversized line: drop until its newline
        self._dropped_size = 0
        self._dropped_head = b""
        self._dropped_tail = b""
        self.transport: asyncio.ReadTransport | None = None
        self._eof_sent = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        start = 0
        find = data.find
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            if self._discarding:
                self._discarding = False
                self._drop(data[start:nl])
                self._oversize()
                start = nl + 1
                continue
            if self._pending:
                self._pending.append(data[start:nl])
                line = b"".join(self._pending)
                self._pending.clear()
                self._pending_size = 0
            else:
                line = data[start:nl]
            start = nl + 1
            if len(line) > self._max_line:
                self._start_dropping(line)
                self._oversize()
                continue
            if line.strip():
                self._on_line(line)
        if start >= len(data):
            return
        rest = data[start:] if start else data
        if self._discarding:
            self._drop(rest)
            return
        self._pending.append(rest)
        self._pending_size += len(rest)
        if self._pending_size > self._max_line:
            self._dropped_size = self._pending_size
            self._dropped_head = _ends(self._pending, HEAD_KEPT, first=True)
            self._dropped_tail = _ends(self._pending, TAIL_KEPT, first=False)
            self._pending.clear()
            self._pending_size = 0
            self._discarding = True

    def _start_dropping(self, line: bytes) -> None:
        self._dropped_size = len(line)
        self._dropped_head = line[:HEAD_KEPT]
        self._dropped_tail = line[-TAIL_KEPT:]

    def _drop(self, piece: bytes) -> None:
        self._dropped_size += len(piece)
        self._dropped_tail = (self._dropped_tail + piece[-TAIL_KEPT:])[-TAIL_KEPT:]

    def _oversize(self) -> None:
        if self._on_oversize is not None:
            self._on_oversize(self._dropped_size, self._dropped_head, self._dropped_tail)
        self._dropped_head = self._dropped_tail = b""

    def eof_received(self) -> bool:
        self._finish()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def _finish(self) -> None:
        if self._eof_sent:
            return
        self._eof_sent = True
        if self._discarding:
            self._discarding = False
            self._oversize()
        if self._pending:
            line = b"".join(self._pending)
            self._pending.clear()
            if line.strip():
                self._on_line(line)
        self._on_eof()

    def pause(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


class LineWriter(asyncio.Protocol):
    """Writes lines to a pipe; tells the source to pause while the pipe's buffer is full."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.on_pause: Callable[[], None] | None = None
        self.on_resume: Callable[[], None] | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.broken = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.broken = exc is not None
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        if self.on_pause:
            self.on_pause()

    def resume_writing(self) -> None:
        if self.on_resume:
            self.on_resume()

    def write_line(self, line: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if len(line) < 65536:
            transport.write(line + b"\n")
        else:  # avoid copying a large message just to append the newline
            transport.write(line)
            transport.write(b"\n")

    async def close(self) -> None:
        """Flush what is buffered, then close."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        await self.closed


def _ends(pieces: list[bytes], size: int, *, first: bool) -> bytes:
    """The first (or last) `size` bytes of the concatenated pieces, without joining them all."""
    kept: list[bytes] = []
    total = 0
    for piece in pieces if first else reversed(pieces):
        kept.append(piece)
        total += len(piece)
        if total >= size:
            break
    return b"".join(kept)[:size] if first else b"".join(reversed(kept))[-size:]


def enlarge_pipe(fd: int) -> None:
    """Fewer, larger reads and writes for big messages (a 5 MB result is 80 wake-ups at 64 KiB)."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError):  # over the user's pipe quota: the default size still works
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)


async def open_line_reader(fd: int, reader: LineReader) -> None:
    """Attach `reader` to a readable fd (pipe, socket, tty; regular files via a thread)."""
    loop = asyncio.get_running_loop()
    if _pollable(fd):
        try:
            await loop.connect_read_pipe(lambda: reader, _own_copy(fd, "rb"))
            return
        except (OSError, ValueError):
            pass  # e.g. /dev/null cannot be polled: fall back to a reading thread
    _read_in_thread(fd, reader, loop)


def _pollable(fd: int) -> bool:
    """True when the event loop can watch fd (pipes, sockets, terminals); pipes are enlarged first.
    Other character devices (/dev/null) cannot be polled: epoll refuses them, and uvloop aborts."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode):
        enlarge_pipe(fd)
        return True
    return stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


def _own_copy(fd: int, mode: str) -> Any:
    """A duplicate of fd for a transport to own and close. Event loops differ in whether closing a
    transport closes the descriptor (uvloop does); with its own copy the caller's fd is never closed
    twice, and the caller closes its own when it chooses (e.g. the child's stdin, to signal EOF)."""
    return os.fdopen(os.dup(fd), mode, buffering=0, closefd=True)


def _read_in_thread(fd: int, reader: LineReader, loop: asyncio.AbstractEventLoop) -> None:
    def pump() -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                loop.call_soon_threadsafe(reader.eof_received)
                return
            loop.call_soon_threadsafe(reader.data_received, chunk)

    threading.Thread(target=pump, name=f"read-fd{fd}", daemon=True).start()


async def open_line_writer(fd: int) -> LineWriter:
    """A `LineWriter` on a writable fd (pipe, socket, tty, or a regular file)."""
    loop = asyncio.get_running_loop()
    writer = LineWriter()
    if _pollable(fd):
        try:
            await loop.connect_write_pipe(lambda: writer, _own_copy(fd, "wb"))
            return writer
        except (OSError, ValueError):
            pass
    writer.transport = _BlockingFileTransport(fd, writer)  # type: ignore[assignment]
    return writer


class _BlockingFileTransport:
    """Minimal write transport for regular files (output redirected to a file)."""

    def __init__(self, fd: int, protocol: LineWriter):
        self._fd = fd
        self._protocol = protocol
        self._closing = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True
        self._protocol.connection_lost(None)
