"""Checking an audit log's hash chain, across rotated files: the first bad line, named, with what is
wrong with it (edited, deleted, reordered, torn, not a record), or the files' report."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.audit.log_lines import LongLine, numbered_lines
from mcp_sampling_proxy.audit.records import (
    GENESIS,
    DuplicateKey,
    parse_object,
    parse_record,
    record_hash,
    rotated_name,
    unique_keys,
)
from mcp_sampling_proxy.text.sanitize import one_line


class Broken(Exception):
    """The chain is broken at `line` of `path`."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


class _Pending(Struct):
    """Lines after the last good record that are not records (torn, garbage), until a seal."""

    first_line: int = 0
    first_problem: str = ""
    lines: int = 0
    size: int = 0
    sha: Any = field(default_factory=hashlib.sha256)

    def add(self, number: int, raw: bytes | LongLine, problem: str) -> None:
        if not self.lines:
            self.first_line, self.first_problem = number, problem
        self.lines += 1
        for piece in raw.pieces() if isinstance(raw, LongLine) else (raw,):
            self.size += len(piece)
            self.sha.update(piece)


class FileReport(Struct):
    path: str
    records: int = 0
    decisions: int = 0
    seals: int = 0
    notes: list[str] = field(default_factory=list)
    last_hash: str | None = None


class Verifier:
    """Checks files in order, raising Broken at the first bad line. A file whose first record
    `continues` another must link to the file given before it; a new log starts its own chain."""

    def __init__(self) -> None:
        self.head: str | None = None  # the hash the next record must link to (None: before any file)
        self.last_seq: dict[str, int] = {}

    def verify(self, path: str) -> FileReport:
        report = FileReport(path)
        pending = _Pending()
        seen: dict[str, int] = {}  # hash -> line, in this file
        previous_line = 0
        total_lines = 0
        for number, offset, raw in numbered_lines(path):
            total_lines = number
            record, problem = _classify(raw)
            if record is None or isinstance(raw, LongLine):
                pending.add(number, raw, problem)
                continue
            expected = record_hash(record)
            if expected != record["hash"]:
                raise Broken(
                    path,
                    number,
                    "edited: the record's hash does not match its content (recomputed "
                    f"{expected[:16]}…, the line says {record['hash'][:16]}…)",
                )
            event = record.get("event")
            first = report.records == 0
            if pending.lines:
                self._check_seal(path, number, record, pending, report, first)
                pending = _Pending()
            elif event == "seal":
                raise Broken(
                    path,
                    number,
                    f"a seal covering {record.get('torn_bytes')} torn bytes, but no torn "
                    "bytes precede it: the torn lines were deleted",
                )
            elif not self._starts_file(path, number, record, report, first):
                self._check_link(path, number, record, seen, previous_line, offset + len(raw))
            self._check_seq(path, number, record)
            self.head = record["hash"]
            seen[record["hash"]] = number
            previous_line = number
            report.records += 1
            report.decisions += event == "decision" or (event is None and "decision" in record)
            report.seals += event == "seal"
        if pending.lines:
            if pending.first_line == total_lines and pending.first_problem.startswith("torn"):
                raise Broken(path, pending.first_line, pending.first_problem + "; the next proxy start seals it")
            raise Broken(path, pending.first_line, pending.first_problem)
        report.last_hash = self.head if report.records else None
        return report

    def _check_file_start(self, path: str, number: int, record: dict[str, Any], report: FileReport) -> None:
        if "continues" not in record:
            raise Broken(
                path,
                number,
                "the first record does not start a file (it has no 'continues' key): lines "
                "were deleted from the start of the file, or it was not written by mcp-sampling-proxy",
            )
        self._check_start_link(path, number, record, report)

    def _check_start_link(self, path: str, number: int, record: dict[str, Any], report: FileReport) -> None:
        prev = record.get("prev_hash")
        continues = record.get("continues")
        if not continues:  # a new log starts its own chain, whatever file was given before it
            if prev != GENESIS:
                raise Broken(
                    path,
                    number,
                    "the first record says this is a new log (continues: null), but its "
                    "prev_hash is not the genesis value",
                )
            writer = record.get("proxy_id")
            if self.head is not None and writer in self.last_seq:
                raise Broken(
                    path,
                    number,
                    f"prev_hash is the genesis value (a new log), but its writer (proxy "
                    f"{writer}) also wrote the file given before it: files are out of order (give them "
                    "oldest first)",
                )
            report.notes.append(
                "the chain starts here (genesis)"
                if self.head is None
                else "a new log: its chain starts here (genesis), independent of the file before it"
            )
        elif self.head is not None:  # a rotated file was given before: this one must continue it
            if prev != self.head:
                raise Broken(
                    path,
                    number,
                    f"prev_hash {str(prev)[:16]}… does not match the last hash of the file "
                    f"given before it ({self.head[:16]}…): a file is missing in between, files are out of "
                    "order (give them oldest first), or records were deleted at the end of the previous file",
                )
        else:
            report.notes.append(
                f"continues the chain of {predecessor(path)} (last hash {str(prev)[:16]}…), not "
                "given: give the rotated files first, oldest first, to check the link"
            )

    def _starts_file(self, path: str, number: int, record: dict[str, Any], report: FileReport, first: bool) -> bool:
        """True when `record` opens its file (checked as such); Broken when it claims to ('continues')
        in the middle of one; False for a record that must link to the one before it."""
        if first:
            self._check_file_start(path, number, record, report)
            return True
        if "continues" in record:
            raise Broken(
                path,
                number,
                "the first record of a file (it has 'continues') in the middle of one: "
                "files were joined or lines moved",
            )
        return False

    def _check_seal(
        self, path: str, number: int, record: dict[str, Any], pending: _Pending, report: FileReport, first: bool
    ) -> None:
        last = pending.first_line + pending.lines - 1
        where = f"line {pending.first_line}" + (f"-{last}" if last > pending.first_line else "")
        if record.get("event") != "seal":
            raise Broken(path, pending.first_line, pending.first_problem + " (and no seal record follows it)")
        if record.get("torn_bytes") != pending.size or record.get("torn_sha256") != pending.sha.hexdigest():
            raise Broken(
                path,
                number,
                f"the seal does not match the {pending.size} bytes at {where} it follows "
                f"(it covers {record.get('torn_bytes')} bytes): they were changed after sealing",
            )
        if not self._starts_file(path, number, record, report, first) and record.get("prev_hash") != self.head:
            raise Broken(
                path,
                number,
                "the seal does not link to the record before the torn bytes: records were deleted or moved",
            )
        report.notes.append(
            f"{where}: {pending.size} bytes that are not records (a write cut short by a crash, "
            f"or foreign lines), sealed by line {number}"
        )

    def _check_link(
        self, path: str, number: int, record: dict[str, Any], seen: dict[str, int], previous: int, after: int
    ) -> None:
        prev = record.get("prev_hash")
        if prev == self.head:
            return
        if isinstance(prev, str) and prev in seen:
            raise Broken(
                path,
                number,
                f"reordered or deleted: this record follows line {seen[prev]}, not line "
                f"{previous} (prev_hash mismatch)",
            )
        later = _find_hash(path, after, prev) if isinstance(prev, str) else None
        if later is not None:
            raise Broken(
                path, number, f"reordered: this record follows line {later}, which comes after it (prev_hash mismatch)"
            )
        raise Broken(
            path,
            number,
            f"deleted or edited: the record this one follows (hash {str(prev)[:16]}…) is "
            f"not in the file (deleted, or edited and re-hashed); expected prev_hash {str(self.head)[:16]}… "
            f"of the record before it (line {previous})",
        )

    def _check_seq(self, path: str, number: int, record: dict[str, Any]) -> None:
        proxy, seq = record.get("proxy_id"), record.get("seq")
        if not isinstance(proxy, str) or not isinstance(seq, int):
            raise Broken(path, number, "the record has no proxy_id/seq")
        last = self.last_seq.get(proxy)
        if last is not None and seq != last + 1:
            kind = "records deleted" if seq > last + 1 else "records reordered or duplicated"
            raise Broken(path, number, f"{kind}: seq of proxy {proxy} goes from {last} to {seq}")
        self.last_seq[proxy] = seq


def predecessor(path: str) -> str:
    """The name of the file rotated before `path`: FILE -> FILE.1, FILE.1 -> FILE.2."""
    base, dot, number = os.path.basename(path).rpartition(".")
    return f"{base}.{int(number) + 1}" if dot and number.isdigit() else os.path.basename(rotated_name(path, 1))


def _classify(raw: bytes | LongLine) -> tuple[dict[str, Any] | None, str]:
    """(record, "") for a good line, else (None, what is wrong with it)."""
    if isinstance(raw, LongLine):
        return None, raw.problem
    complete = raw.endswith(b"\n")
    record = parse_record(raw)
    if record is not None and complete:
        return record, ""
    if not complete:
        return None, ("torn: the last line has no newline at its end (a write cut short by a crash or a full disk)")
    if parse_object(raw) is not None:
        return None, "not a chained record: no valid hash"
    try:
        json.loads(raw, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:
        return None, (
            f"edited: the line names the key '{one_line(exc.key, 60)}' twice (readers disagree on "
            "which value counts; the hash covers one of them)"
        )
    except (ValueError, RecursionError):
        return None, "not JSON: garbage, or a torn write"
    return None, "not a record: a JSON value that is not an object"


def _find_hash(path: str, offset: int, wanted: str) -> int | None:
    """The line number of a later record with hash `wanted`, or None."""
    for number, start, raw in numbered_lines(path):
        if start < offset or isinstance(raw, LongLine):
            continue
        record = parse_record(raw)
        if record is not None and record.get("hash") == wanted:
            return number
    return None
