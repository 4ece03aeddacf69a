"""Follow an audit log as it grows: `audit tail -f` and the web console both read it through here.

The log is written by proxies, but anyone running as the user can append to it (the governed
server included), so a reader holds bounded memory whatever the file holds: it starts from the
last lines (read backwards, at most `MAX_START_BYTES`), reads new bytes in chunks, and a line
longer than `MAX_LINE` is skipped (reported by its size) instead of being gathered whole. It
follows rotation (a new file at the path: the old one is read to its end first) and truncation.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from mcp_sampling_proxy.system.shared_files import open_regular

MAX_LINE = 64 * 1024 * 1024  # a record holding a large image in `content: full` fits
MAX_START_BYTES = 64 * 1024 * 1024  # the last lines are looked for in at most this much of the file's end
CHUNK = 1024 * 1024

Line = bytes | int  # a complete line (with its newline), or the size of one that was too long and skipped


def last_lines(f: BinaryIO, count: int, max_bytes: int = MAX_START_BYTES) -> tuple[list[bytes], int]:
    """The last `count` complete lines of the open file (within its last `max_bytes`), and the
    offset after the last complete line."""
    size = os.fstat(f.fileno()).st_size
    data = b""
    start = size
    while start > 0 and data.count(b"\n") <= count and size - start < max_bytes:
        step = min(start, max(64 * 1024, len(data)), max_bytes - (size - start))
        start -= step
        f.seek(start)
        data = f.read(step) + data
    end = data.rfind(b"\n") + 1  # leave out an incomplete last line
    lines = data[:end].splitlines(keepends=True)
    if start > 0:
        lines = lines[1:]  # the first may be cut
    return (lines[-count:] if count else []), start + end


class Follower:
    """The lines appended to the file at `path`; `read()` returns what is new since the last call.

    `last`: how many of the lines already there to return first. A missing file is waited for
    (`read` raises FileNotFoundError until it appears)."""

    def __init__(self, path: str, *, last: int, max_line: int = MAX_LINE):
        self.path = path
        self._last = last
        self._max_line = max_line
        self._file: BinaryIO | None = None
        self._pieces: list[bytes] = []  # of the line being read, not yet ended
        self._held = 0  # their total size
        self._skipping = 0  # > 0: inside a line too long to keep, this many bytes of it seen

    def read(self) -> list[Line]:
        """New complete lines (and sizes of skipped ones), following rotation and truncation.
        Raises FileNotFoundError while there is no file, OSError when it cannot be read."""
        out: list[Line] = []
        if self._file is None:
            self._file = _open(self.path)
            first, offset = last_lines(self._file, self._last)
            out += first
            self._file.seek(offset)
        self._drain(out)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return out  # rotated away and not yet replaced: the old file is read to its end
        if st.st_ino != os.fstat(self._file.fileno()).st_ino:  # rotated: the rest of the old file, then the new
            self._drain(out)
            self._end_line(out)
            self._file.close()
            self._file = None  # an open that fails below leaves the next read to open afresh
            self._file = _open(self.path)
            self._drain(out)
        elif st.st_size < self._file.tell():  # truncated: from the start again
            self._file.seek(0)
            self._pieces, self._held, self._skipping = [], 0, 0
            self._drain(out)
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _drain(self, out: list[Line]) -> None:
        assert self._file is not None
        while chunk := self._file.read(CHUNK):
            self._take(chunk, out)

    def _take(self, chunk: bytes, out: list[Line]) -> None:
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            if self._skipping:
                out.append(self._skipping + nl - start + 1)
                self._skipping = 0
            else:
                out.append(b"".join([*self._pieces, chunk[start : nl + 1]]))
                self._pieces, self._held = [], 0
            start = nl + 1
        rest = chunk[start:]
        if self._skipping:
            self._skipping += len(rest)
        elif self._held + len(rest) > self._max_line:
            self._skipping = self._held + len(rest)
            self._pieces, self._held = [], 0
        elif rest:
            self._pieces.append(rest)
            self._held += len(rest)

    def _end_line(self, out: list[Line]) -> None:
        """A file left without a final newline (a torn write before rotation): its last bytes end there."""
        if self._skipping:
            out.append(self._skipping)
        elif self._pieces:
            out.append(b"".join(self._pieces))
        self._pieces, self._held, self._skipping = [], 0, 0


def _open(path: str) -> BinaryIO:
    """The log, kept open across reads (close() closes it): a regular file only, opened without
    blocking (anyone running as the user can put a FIFO or a device at the path)."""
    return os.fdopen(open_regular(path), "rb")
