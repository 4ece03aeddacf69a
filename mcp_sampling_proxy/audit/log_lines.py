"""Reading an audit log line by line: every line, however long anyone running as the user made it,
and the records among them (`verify`, `summary` and the web console read through this)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mcp_sampling_proxy.audit.records import (
    parse_object,
)
from mcp_sampling_proxy.audit.tail import MAX_RECORD_BYTES


class InputError(Exception):
    """A file that cannot be read, or a bad argument: exit 2."""


def _open(path: str) -> Any:
    try:
        return open(path, "rb")  # the caller closes it
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None


_SHORT_LINE = 64 * 1024  # a line read whole at once; a longer one only when it may be a record


class LongLine:
    """A line that cannot be a record and is read in pieces, never held whole: longer than any record
    (MAX_RECORD_BYTES), or long and not starting with "{" as every record does. Anyone running as
    the user can append to the log, so a line is as long as they chose."""

    def __init__(self, f: Any, first: bytes, problem: str):
        self._f = f
        self._first: bytes | None = first
        self.problem = problem
        self.size = 0
        self._done = False

    def pieces(self) -> Iterator[bytes]:
        """The line's bytes (with its newline, when it has one), once, in order."""
        if self._first is not None:
            first, self._first = self._first, None
            self.size += len(first)
            yield first
        while not self._done:
            piece = self._f.readline(1 << 20)
            self.size += len(piece)
            self._done = not piece or piece.endswith(b"\n")
            if piece:
                yield piece

    def drain(self) -> None:
        for _ in self.pieces():
            pass


def numbered_lines(path: str) -> Iterator[tuple[int, int, bytes | LongLine]]:
    """(line number, offset, raw bytes with their newline) of each line of the file; a line that
    cannot be a record (over MAX_RECORD_BYTES, or over 64 KiB without a leading "{") comes as a
    LongLine (read its pieces or not: the next line is found either way)."""
    with _open(path) as f:
        offset = 0
        number = 0
        while raw := f.readline(_SHORT_LINE):
            number += 1
            long: LongLine | None = None
            if len(raw) == _SHORT_LINE and not raw.endswith(b"\n"):
                if not raw.startswith(b"{"):
                    long = LongLine(f, raw, "not a record: a line that does not start with '{' as records do")
                else:
                    raw += f.readline(MAX_RECORD_BYTES + 1 - len(raw))
                    if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
                        long = LongLine(
                            f, raw, f"not a record: a line longer than any record (over {MAX_RECORD_BYTES:,} bytes)"
                        )
            if long is not None:
                yield number, offset, long
                long.drain()
                offset += long.size
                continue
            yield number, offset, raw
            offset += len(raw)


def read_records(path: str) -> Iterator[dict[str, Any]]:
    """Every complete JSON object line of the file (torn or foreign lines are skipped)."""
    for _number, _offset, raw in numbered_lines(path):
        if isinstance(raw, LongLine) or not raw.endswith(b"\n"):
            continue
        if (value := parse_object(raw)) is not None:
            yield value
