"""`mcp-sampling-proxy audit verify|tail|summary`: check and read audit logs.

- `verify FILE...` walks the hash chain (give rotated files oldest first: FILE.2 FILE.1 FILE)
  and exits 0 when it is intact, 1 at the first bad line (named, with what is wrong: edited,
  deleted, reordered, torn, not a record), 2 when a file cannot be read.
- `tail [-f] [-n N] [--json] FILE` prints the last records, one line each, escape sequences
  stripped (everything in a record may come from a server); `-f` follows the file, across
  rotations.
- `summary [--since 1d] [--json] FILE...`: per server, requests, allowed, denied, errors,
  tokens in/out, median (p50) latency of fulfilled requests, and what the proxy's LLM calls cost;
  then the tool decisions (calls allowed, denied, held; tools hidden; pin changes) and the requests
  the sampling checks refused (unsolicited, max_per_call, external checks, credentials).

Without FILE each reads the policy's `audit.path` (the default policy, or `--policy FILE`), as
`console --web` does, and says what to give when there is neither.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_sampling_proxy.audit.follow import Follower
from mcp_sampling_proxy.audit.records import (
    GENESIS,
    DuplicateKey,
    parse_object,
    parse_record,
    record_hash,
    rotated_name,
    unique_keys,
)
from mcp_sampling_proxy.audit.tail import MAX_RECORD_BYTES
from mcp_sampling_proxy.config.paths import default_policy_path, policy_or_default
from mcp_sampling_proxy.config.prices import UNPRICED, format_usd, usd
from mcp_sampling_proxy.config.settings import load_settings
from mcp_sampling_proxy.sanitize import one_line
from mcp_sampling_proxy.units import DURATION_FORMS, parse_duration
from mcp_sampling_proxy.vocabulary import ALLOWED_OUTCOMES, REFUSED_OUTCOMES
from mcp_sampling_proxy.yamlnodes import PolicyError

PROG = "mcp-sampling-proxy audit"
ALLOWED = ALLOWED_OUTCOMES
DENIED = REFUSED_OUTCOMES


FILE_HELP = "the audit log (default: audit.path of the policy: --policy, else the default policy file)"
POLICY_HELP = "without FILE: read audit.path from this policy (default: the file `init` writes, when it exists)"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Check and read audit logs. Without FILE, each reads the log the policy names in audit.path "
        "(the default policy, or --policy FILE).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    verify = sub.add_parser(
        "verify",
        help="check the hash chain; exit 0 when intact, 1 at the first bad line, 2 on unreadable files",
        description="Check the hash chain of audit log files. Give rotated files oldest first "
        "(FILE.2 FILE.1 FILE) to check the links between them. Exit 0 when intact, 1 at the first bad line "
        "(named, with what is wrong), 2 when a file cannot be read. Without FILE: the policy's audit.path.",
    )
    verify.add_argument("files", nargs="*", metavar="FILE", help=FILE_HELP)
    verify.add_argument("--policy", metavar="FILE", help=POLICY_HELP)
    tail = sub.add_parser(
        "tail",
        help="print the last records, one line each",
        description="Print the last records of an audit log, one line each (escape sequences stripped). "
        "Without FILE: the policy's audit.path.",
    )
    tail.add_argument("file", nargs="?", metavar="FILE", help=FILE_HELP)
    tail.add_argument("--policy", metavar="FILE", help=POLICY_HELP)
    tail.add_argument("-n", "--lines", type=int, default=10, metavar="N", help="how many records (default 10)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records (Ctrl-C to stop)")
    tail.add_argument("--json", action="store_true", help="print the records as JSON lines")
    summary = sub.add_parser(
        "summary",
        help="per server: requests, allowed, denied, tokens, p50 latency, cost",
        description="Per server: requests, allowed, denied, errors, input/output tokens, "
        "median latency of fulfilled requests, and their cost in USD (calls of unpriced models counted "
        "apart). Without FILE: the policy's audit.path.",
    )
    summary.add_argument("files", nargs="*", metavar="FILE", help=FILE_HELP)
    summary.add_argument("--policy", metavar="FILE", help=POLICY_HELP)
    summary.add_argument(
        "--since", metavar="WHEN", help="only records of the last WHEN (30m, 12h, 1d, ...) or since an ISO 8601 time"
    )
    summary.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(list(argv))
    files = [args.file] if args.action == "tail" and args.file else getattr(args, "files", [])
    if files and args.policy:
        sub.choices[args.action].error("give the audit log FILE or --policy FILE (to read its audit.path), not both")
    try:
        files = files or [policy_audit_path(args.policy)]
        if args.action == "verify":
            return verify_main(files)
        if args.action == "tail":
            if args.lines < 0:
                parser.error("-n must be 0 or more")
            return tail_main(files[0], args.lines, follow=args.follow, as_json=args.json)
        since = parse_since(args.since) if args.since else None
        return summary_main(files, since, as_json=args.json)
    except InputError as exc:
        print(f"{PROG} {args.action}: error: {exc}", file=sys.stderr)
        return 2


def policy_audit_path(given: str | None) -> str:
    """The audit log the policy names (`given`, else the default policy file); InputError saying what to
    give instead when there is no policy, it cannot be read, or it keeps no audit log."""
    policy, _ = policy_or_default(given)
    if policy is None:
        raise InputError(
            f"no FILE given, and no policy at {default_policy_path()} to read audit.path from: "
            "give the audit log FILE, or --policy FILE"
        )
    try:
        settings = load_settings(policy, environ={})
    except PolicyError as exc:
        raise InputError(f"no FILE given, and the policy cannot be read for its audit.path:\n{exc}") from None
    if settings.audit_path is None:
        raise InputError(
            f"no FILE given, and the policy {policy} has no audit.path (no audit log is written): give the "
            "audit log FILE, or add 'audit: {path: FILE}' to the policy"
        )
    return settings.audit_path


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


def _lines(path: str) -> Iterator[tuple[int, int, bytes | LongLine]]:
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


# -- verify ---------------------------------------------------------------------------------------


class Broken(Exception):
    """The chain is broken at `line` of `path`."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line


@dataclass
class _Pending:
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


@dataclass
class FileReport:
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
        for number, offset, raw in _lines(path):
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
            elif first:
                self._check_file_start(path, number, record, report)
            elif "continues" in record:
                raise Broken(
                    path,
                    number,
                    "the first record of a file (it has 'continues') in the middle of one: "
                    "files were joined or lines moved",
                )
            else:
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
        if first:
            self._check_file_start(path, number, record, report)
        elif "continues" in record:
            raise Broken(
                path,
                number,
                "the first record of a file (it has 'continues') in the middle of one: "
                "files were joined or lines moved",
            )
        elif record.get("prev_hash") != self.head:
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
    for number, start, raw in _lines(path):
        if start < offset or isinstance(raw, LongLine):
            continue
        record = parse_record(raw)
        if record is not None and record.get("hash") == wanted:
            return number
    return None


def verify_main(paths: Sequence[str]) -> int:
    verifier = Verifier()
    for path in paths:
        try:
            report = verifier.verify(path)
        except Broken as exc:
            print(f"{exc} -- verification stopped at the first problem", file=sys.stderr)
            return 1
        if report.records == 0 and not report.notes:
            print(f"{path}: ok: empty")
            continue
        print(
            f"{path}: ok: {report.records} records ({report.decisions} decisions, {report.seals} seals); "
            f"last hash {report.last_hash}"
        )
        for note in report.notes:
            print(f"  note: {note}")
    if len(paths) == 1 and os.path.exists(rotated_name(paths[0], 1)):
        print(f"  note: {rotated_name(paths[0], 1)} exists: verify FILE.N ... FILE.1 FILE to check across rotations")
    print(
        "note: a hash chain shows edits, deletions and reordering inside the log, not records removed from its "
        "end; keep the last hash elsewhere to check that"
    )
    return 0


# -- reading records ----------------------------------------------------------------------------


def read_records(path: str) -> Iterator[dict[str, Any]]:
    """Every complete JSON object line of the file (torn or foreign lines are skipped)."""
    for _number, _offset, raw in _lines(path):
        if isinstance(raw, LongLine) or not raw.endswith(b"\n"):
            continue
        if (value := parse_object(raw)) is not None:
            yield value


def is_decision(record: dict[str, Any]) -> bool:
    return record.get("event", "decision") == "decision" and "decision" in record


def _s(value: Any, limit: int = 120) -> str:
    return one_line(str(value), limit)


TOOL_METHODS = ("tools/call", "tools/list")  # the records of tools.rules and tool pins


def format_record(record: dict[str, Any]) -> str:
    """One human-readable line; everything from the record is stripped of control characters."""
    ts = _s(record.get("ts", "?"), 40)
    event = record.get("event", "decision")
    if event == "seal":
        return (
            f"{ts}  -- seal: {_s(record.get('torn_bytes'))} bytes after the last record sealed "
            f"({_s(record.get('reason', ''))}; proxy {_s(record.get('proxy_id'))})"
        )
    if not is_decision(record):
        return f"{ts}  -- {_s(event)} record"
    parts = [ts, _s(record.get("server") or "?", 40)]
    if record.get("client"):  # the caller, under serve
        parts.append(f"client={_s(record['client'], 40)}")
    if record.get("replica"):  # which serve replica wrote it (several behind a balancer)
        parts.append(f"replica={_s(record['replica'], 60)}")
    if record.get("method") in TOOL_METHODS:  # a decision on the host's tool call itself, not a sampling in it
        parts.append(f"{record['method']} {_s(record.get('tool') or '?', 40)}:")
    elif record.get("tool"):
        parts.append(f"tool={_s(record['tool'], 40)}")
    if record.get("method") == "elicitation/create":
        parts.append(elicitation_outcome(record))
        return "  ".join(parts)
    decision = _s(record.get("decision") or "?", 20)
    if record.get("approver") and decision in ("approved", "rejected", "timeout"):
        decision += f" by {_s(record['approver'], 40)}"
        named = record.get("approved_by")
        if isinstance(named, list) and named and named != [record["approver"]]:  # a quorum, named approvers
            decision += f" [{_s(', '.join(str(n) for n in named), 200)}]"
    if record.get("rule"):
        decision += f" (rule {_s(record['rule'], 40)})"
    parts.append(decision)
    for key, what in (("prompt_edited_by", "prompt"), ("answer_edited_by", "answer")):
        if record.get(key):
            parts.append(f"{what} edited by {_s(record[key], 20)}")
    checks = record.get("checks")  # external checks, in the order they ran: "checks scan allow, dlp deny"
    if isinstance(checks, list) and checks:
        ran = [f"{_s(c.get('name'), 40)} {_s(c.get('verdict'), 10)}" for c in checks[:8] if isinstance(c, dict)]
        parts.append("checks " + ", ".join(ran))
    if record.get("provider") or record.get("model"):
        parts.append(f"{_s(record.get('provider') or '?', 30)}/{_s(record.get('model') or '?', 60)}")
    if record.get("input_tokens") is not None or record.get("output_tokens") is not None:
        parts.append(f"{_s(record.get('input_tokens'))}+{_s(record.get('output_tokens'))} tokens")
    if isinstance(record.get("cost_usd"), int | float) and not isinstance(record.get("cost_usd"), bool):
        parts.append(format_usd(round(record["cost_usd"] * 1_000_000)))
    elif record.get("price_as_of") == UNPRICED:
        parts.append("unpriced")
    if record.get("latency_ms") is not None:
        parts.append(f"{_s(record['latency_ms'])} ms")
    if record.get("stop_reason"):
        parts.append(_s(record["stop_reason"], 30))
    if record.get("error"):
        parts.append(f"error: {_s(record['error'], 200)}")
    elif record.get("decision") in (*DENIED, "error") and record.get("reason"):
        parts.append(f"reason: {_s(record['reason'], 200)}")
    return "  ".join(parts)


ELICITATION_ACTIONS = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}


def elicitation_outcome(record: dict[str, Any]) -> str:
    """What the server was answered and who or what decided it. An elicitation's `decision` says
    how the policy ended (a non-interactive decline is `deny` even under an allow rule), so the
    answer (`action`) and the reason are what tell the story: "declined (nobody can be asked ...)"."""
    action = record.get("action")
    approver = record.get("approver")
    if action is None:
        text = f"no answer from {_s(approver, 20)}" if approver else "no answer"
    else:
        text = ELICITATION_ACTIONS.get(action, _s(action, 20))
        if approver:
            text += f" by {_s(approver, 20)}"
    details = []
    if not approver and record.get("reason"):
        details.append(_s(record["reason"], 200))
    if record.get("rule"):
        details.append(f"rule {_s(record['rule'], 40)}")
    return f"{text} ({'; '.join(details)})" if details else text


def _render(record: dict[str, Any], as_json: bool) -> str:
    # ensure_ascii escapes every control and non-ASCII character: safe for any terminal
    return json.dumps(record, ensure_ascii=True) if as_json else format_record(record)


# -- tail -------------------------------------------------------------------------------------------


def tail_main(path: str, count: int, *, follow: bool, as_json: bool, poll: float = 0.2) -> int:
    follower = Follower(path, last=count)
    try:
        try:
            lines = follower.read()
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
        for raw in lines:
            _print_line(raw, as_json)
        while follow:
            time.sleep(poll)
            for raw in follower.read():
                _print_line(raw, as_json)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        follower.close()


def _print_line(raw: bytes | int, as_json: bool) -> None:
    """One line of the file (an int: the size of a line too long to read, see audit/follow.py)."""
    value = parse_object(raw) if isinstance(raw, bytes) else None
    if value is not None:
        text = _render(value, as_json)
    else:
        size = raw if isinstance(raw, int) else len(raw)
        text = (
            json.dumps({"unreadable_line_bytes": size}) if as_json else f"?? a line that is not a record ({size} bytes)"
        )
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `audit tail | head`
        with contextlib.suppress(OSError):
            sys.stdout.close()
        raise SystemExit(0) from None


# -- summary ----------------------------------------------------------------------------------------


def parse_since(text: str, now: datetime | None = None) -> datetime:
    now = now or datetime.now(UTC)
    try:
        return now - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    when = parse_ts(text)
    if when is None:
        raise InputError(f"--since {text!r} is neither a duration ({DURATION_FORMS}) nor an ISO 8601 time")
    return when


def parse_ts(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


TOOL_METHODS = ("tools/call", "tools/list")  # the tools: section's records: not a server's requests
UNSOLICITED = "unsolicited"  # the reason of a sampling request refused with no host request in flight
MAX_PER_CALL = "max_per_call"  # the limit of one refused past sampling.max_per_call


@dataclass
class ServerStats:
    requests: int = 0  # the server's sampling and elicitation requests
    allowed: int = 0
    denied: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0  # of the proxy's own LLM calls that were priced
    unpriced: int = 0  # LLM calls of the proxy whose model had no price (their cost is not in cost_micros)
    costed: int = 0  # records that say what they cost (logs of older versions have none)
    tool_calls_allowed: int = 0  # host tools/call a tools: rule allowed, or a human approved
    tool_calls_denied: int = 0  # ... a tools: rule refused, or a human refused (or nobody answered)
    tool_calls_held: int = 0  # ... refused because the tool changed since it was pinned
    tools_hidden: int = 0  # tools/list decisions that hid tools from the host (a deny rule, untrusted pins)
    tool_changes: int = 0  # pinned tools that changed, appeared or went (tool_change records)
    unsolicited: int = 0  # sampling refused: no host request in flight
    max_per_call: int = 0  # sampling refused: past sampling.max_per_call
    checks_denied: int = 0  # sampling refused by an external check (or its failure, with on_error: deny)
    secrets_found: int = 0  # requests whose prompt or answer held credentials (answer_secrets, prompt_secrets)
    secrets_denied: int = 0  # ... and were refused for it (sampling.on_secret: deny)
    latencies: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "allowed": self.allowed,
            "denied": self.denied,
            "errors": self.errors,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": usd(self.cost_micros),
            "unpriced": self.unpriced,
            "p50_latency_ms": p50(self.latencies),
            "tools": {
                "calls_allowed": self.tool_calls_allowed,
                "calls_denied": self.tool_calls_denied,
                "calls_held": self.tool_calls_held,
                "hidden": self.tools_hidden,
                "changes": self.tool_changes,
            },
            "refused": {
                "unsolicited": self.unsolicited,
                "max_per_call": self.max_per_call,
                "checks": self.checks_denied,
                "secrets": self.secrets_denied,
            },
            "secrets_found": self.secrets_found,
        }


TOOL_COLUMNS = ("tool_calls_allowed", "tool_calls_denied", "tool_calls_held", "tools_hidden", "tool_changes")
CHECK_COLUMNS = ("unsolicited", "max_per_call", "checks_denied", "secrets_denied", "secrets_found")
GOVERNANCE = (*TOOL_COLUMNS, *CHECK_COLUMNS)
SUMMED = (
    "requests",
    "allowed",
    "denied",
    "errors",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "unpriced",
    "costed",
    *GOVERNANCE,
)


def p50(values: list[int]) -> float | None:
    """The median (average of the middle two for an even count), None without values."""
    return statistics.median(values) if values else None


def summarize(records: Sequence[dict[str, Any]], since: datetime | None = None) -> dict[str, ServerStats]:
    """Per-server numbers. A request is counted once (by proxy_id, session and request_id) with the outcome
    of its last record (a response rejected on review follows its `allow` record); tokens add up
    over all records; latency is that of fulfilled requests (no error). The records of the tools:
    section (the host's tools/call and tools/list) are counted apart, each record once."""
    stats: dict[str, ServerStats] = {}
    outcome: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
    for index, record in enumerate(records):
        if not is_decision(record):
            continue
        if since is not None:
            when = parse_ts(record.get("ts"))
            if when is None or when < since:
                continue
        server = str(record.get("server") or "?")
        entry = stats.setdefault(server, ServerStats())
        if record.get("method") in TOOL_METHODS:
            count_tool_decision(entry, record)
            continue
        entry.input_tokens += _int(record.get("input_tokens"))
        entry.output_tokens += _int(record.get("output_tokens"))
        cost = record.get("cost_usd")
        entry.costed += "price_as_of" in record
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            entry.cost_micros += round(cost * 1_000_000)
        elif record.get("price_as_of") == UNPRICED:
            entry.unpriced += 1
        if record.get("latency_ms") is not None and record.get("error") is None and record.get("provider"):
            entry.latencies.append(_int(record["latency_ms"]))
        request_id = record.get("request_id")
        # under serve, each session's server numbers its requests from 1: the session tells them apart
        key = (
            (server, record.get("proxy_id"), record.get("session"), json.dumps(request_id))
            if request_id is not None
            else (index,)
        )
        outcome[key] = (server, record)
    for server, record in outcome.values():
        entry = stats[server]
        entry.requests += 1
        decision = record.get("decision")
        if decision in DENIED:
            entry.denied += 1
        elif decision in ALLOWED and record.get("error") is None:
            entry.allowed += 1
        else:
            entry.errors += 1
        count_sampling_checks(entry, record)
    return dict(sorted(stats.items()))


def count_tool_decision(entry: ServerStats, record: dict[str, Any]) -> None:
    """One record of the tools: section: a call's fate, a listing that hid tools, or a pin change."""
    decision = record.get("decision")
    if record.get("tool_change") is not None:
        entry.tool_changes += 1
    elif record.get("method") == "tools/list":
        entry.tools_hidden += decision in DENIED
    elif decision in ALLOWED:
        entry.tool_calls_allowed += 1
    elif decision == "deny" and record.get("rule") is None:  # no rule refused it: its pin held it
        entry.tool_calls_held += 1
    elif decision in DENIED:
        entry.tool_calls_denied += 1


def count_sampling_checks(entry: ServerStats, record: dict[str, Any]) -> None:
    """What the sampling checks did to one request (its last record): refused it, or found credentials."""
    refused = record.get("decision") in DENIED
    secrets = bool(record.get("answer_secrets") or record.get("prompt_secrets"))
    entry.secrets_found += secrets
    if not refused:
        return
    checks = record.get("checks")
    if record.get("reason") == UNSOLICITED:
        entry.unsolicited += 1
    elif record.get("limit") == MAX_PER_CALL:
        entry.max_per_call += 1
    elif isinstance(checks, list) and any(
        isinstance(c, dict)
        and (c.get("verdict") == "deny" or (c.get("verdict") == "error" and c.get("on_error") != "allow"))
        for c in checks
    ):
        entry.checks_denied += 1
    elif secrets:
        entry.secrets_denied += 1


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def summary_main(paths: Sequence[str], since: datetime | None, *, as_json: bool) -> int:
    records = [record for path in paths for record in read_records(path)]
    stats = summarize(records, since)
    total = total_of(stats)
    replicas = by_replica(records, since)
    if as_json:
        print(
            json.dumps(
                {
                    "since": since.isoformat().replace("+00:00", "Z") if since else None,
                    "servers": {server: entry.as_dict() for server, entry in stats.items()},
                    "total": total.as_dict(),
                    **({"replicas": {name: entry.as_dict() for name, entry in replicas.items()}} if replicas else {}),
                },
                ensure_ascii=True,
                indent=2,
            )
        )
        return 0
    header: tuple[str, ...] = ("server", "requests", "allowed", "denied", "errors", "tokens in", "tokens out")
    header += ("p50 latency", "cost") if total.costed else ("p50 latency",)  # a log that says what calls cost
    rows = [[_s(server, 40), *_numbers(entry)][: len(header)] for server, entry in stats.items()]
    rows.append(["total", *_numbers(total)][: len(header)])
    if since:
        print(f"since {since.isoformat(timespec='seconds').replace('+00:00', 'Z')}")
    print_table(list(header), rows)
    tables = (
        (TOOL_COLUMNS, ("server", "tool calls allowed", "denied", "held", "tools hidden", "tool changes")),
        (
            CHECK_COLUMNS,
            ("server", "refused unsolicited", "over max_per_call", "by checks", "for secrets", "secrets found"),
        ),
    )
    if replicas:  # the logs of several serve replicas: what each one decided
        print()
        print_table(
            ["replica", "requests", "allowed", "denied", "errors"],
            [[_s(name, 60), *_numbers(entry)[:4]] for name, entry in replicas.items()],
        )
    for columns, names in tables:  # shown when the log has any: tool decisions, sampling checks' work
        if any(getattr(total, column) for column in columns):
            print()
            print_table(
                list(names),
                [
                    [_s(server, 40), *(str(getattr(e, c)) for c in columns)]
                    for server, e in [*stats.items(), ("total", total)]
                ],
            )
    return 0


def total_of(stats: dict[str, ServerStats]) -> ServerStats:
    total = ServerStats()
    for entry in stats.values():
        for name in SUMMED:
            setattr(total, name, getattr(total, name) + getattr(entry, name))
        total.latencies += entry.latencies
    return total


def by_replica(records: Sequence[dict[str, Any]], since: datetime | None) -> dict[str, ServerStats]:
    """The numbers of each `serve` replica that wrote records (`replica`), for the logs of several."""
    names = sorted({str(r["replica"]) for r in records if is_decision(r) and r.get("replica")})
    return {name: total_of(summarize([r for r in records if r.get("replica") == name], since)) for name in names}


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell: the first to the left, the numbers to the right."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                str(cell).ljust(widths[0]) if i == 0 else str(cell).rjust(widths[i]) for i, cell in enumerate(row)
            ).rstrip()
        )


def _numbers(entry: ServerStats) -> list[str]:
    latency = p50(entry.latencies)
    return [
        str(entry.requests),
        str(entry.allowed),
        str(entry.denied),
        str(entry.errors),
        f"{entry.input_tokens:,}",
        f"{entry.output_tokens:,}",
        "-" if latency is None else f"{latency:g} ms",
        format_usd(entry.cost_micros) + (f" (+{entry.unpriced} unpriced)" if entry.unpriced else ""),
    ]
