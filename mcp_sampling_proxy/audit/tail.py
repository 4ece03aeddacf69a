"""Reading the end of an audit log: where its last good record ends, and that record's hash.

A writer reads back what another writer left before it appends (`chain_file.py`), and `audit
verify` reads whole files through `parse_record`. Anyone running as the user (a governed server
too) can append to the log, so a tail is read within bounds: memory stays within one record, and
the search for the last record gives up rather than read gigabytes.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.audit.records import parse_record

# The longest line taken for a record (a longer one is never read whole): twice the default message
# limit, so a record holding a whole request in `audit.content: full` fits; it is also the most a
# foreign line can make a writer hold (plus its parse).
MAX_RECORD_BYTES = 128 * 1024 * 1024
TAIL_SEARCH_BYTES = 4 * MAX_RECORD_BYTES  # how far from the end the last record is looked for
TAIL_SEARCH_LINES = 1000  # lines that start like a record but are not one, tried before giving up
_LINE_CHUNK = 1024 * 1024
_RECORD_END = re.compile(rb'"hash"\s*:\s*"[0-9a-f]{64}"\s*\}\s*\Z')  # the writer puts `hash` last
_READ_CHUNK = 64 * 1024


class Tail(Struct):
    """What the end of an audit file holds."""

    last_hash: str | None  # hash of the last good record (None: no good record in the file)
    good_end: int  # offset just after that record's line (0 when none)
    size: int
    needs_newline: bool = False  # the last record is complete but its newline is missing
    searched_all: bool = True  # False: no record within the search's bounds (the file's start not reached)


def read_tail(fd: int, size: int) -> Tail:
    """Find the last good record of the file open at `fd` (`size` bytes), searching backwards.

    Only lines that start with "{" can be records (every record does), and only lines up to
    MAX_RECORD_BYTES are read, so a foreign tail costs at most one record's memory. The search gives
    up after TAIL_SEARCH_LINES lines that look like records but are not, or past TAIL_SEARCH_BYTES
    from the end: then `searched_all` is False (and `good_end` is where it stopped)."""
    if size == 0:
        return Tail(None, 0, 0)
    floor = max(0, size - TAIL_SEARCH_BYTES)
    before = size  # the next candidate line starts before this offset
    tried = 0
    while before > 0:
        newline = _rfind(fd, b"\n{", floor, before)
        if newline >= 0:
            start = newline + 1
        elif floor == 0 and os.pread(fd, 1, 0) == b"{":
            start = 0
        else:
            return Tail(None, floor, size, searched_all=floor == 0)
        if tried >= TAIL_SEARCH_LINES:
            return Tail(None, start, size, searched_all=False)
        line, end = _line_at(fd, start, size)
        record = parse_record(line) if line is not None else None
        if record is not None:
            if end == size:  # a complete last record whose newline is missing
                return Tail(record["hash"], size, size, needs_newline=True)
            return Tail(record["hash"], end + 1, size)
        tried += 1
        before = max(start - 1, 0)
    return Tail(None, 0, size)


def _rfind(fd: int, pattern: bytes, start: int, end: int) -> int:
    """The offset of the last `pattern` wholly inside file[start:end], or -1 (read backwards in chunks)."""
    high = end
    while high > start:
        low = max(start, high - _READ_CHUNK)
        chunk = os.pread(fd, min(end, high + len(pattern) - 1) - low, low)
        found = chunk.rfind(pattern)
        if found >= 0:
            return low + found
        high = low
    return -1


def _chunks(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of file[start:end], a chunk at a time (fewer when the file is shorter)."""
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(_LINE_CHUNK, end - pos), pos)
        if not chunk:
            return
        yield pos, chunk
        pos += len(chunk)


def _line_at(fd: int, start: int, size: int) -> tuple[bytes | None, int]:
    """(the line at `start` without its newline, the newline's offset or `size` when it runs to the end).
    The line is None when it is longer than MAX_RECORD_BYTES: it is then not read whole. Its end is
    found first, so a line is held once (not as chunks and their join)."""
    end = _find_newline(fd, start, min(size, start + MAX_RECORD_BYTES + 1))
    if end - start > MAX_RECORD_BYTES:
        return None, _find_newline(fd, end, size)
    if end - start > _READ_CHUNK and not _RECORD_END.search(os.pread(fd, 160, max(start, end - 160))):
        return None, end  # a long line that does not end as every record does: not read whole
    return os.pread(fd, end - start, start), end


def _find_newline(fd: int, pos: int, size: int) -> int:
    """The offset of the next newline at or after `pos`, or `size`."""
    for at, chunk in _chunks(fd, pos, size):
        found = chunk.find(b"\n")
        if found >= 0:
            return at + found
    return size


def digest_range(fd: int, start: int, end: int) -> tuple[Any, int]:
    """(a sha256 of file[start:end], the offset of its first newline or -1), read in chunks."""
    sha = hashlib.sha256()
    first_newline = -1
    for pos, chunk in _chunks(fd, start, end):
        sha.update(chunk)
        if first_newline < 0 and (found := chunk.find(b"\n")) >= 0:
            first_newline = pos + found
    return sha, first_newline


def file_hash(path: str) -> str | None:
    """The last good hash in the file at `path` (None when missing or without records)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return read_tail(fd, os.fstat(fd).st_size).last_hash
    finally:
        os.close(fd)
