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

import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mcp_sampling_proxy.audit.follow import Follower
from mcp_sampling_proxy.audit.log_lines import InputError, read_records
from mcp_sampling_proxy.audit.records import parse_object, rotated_name
from mcp_sampling_proxy.audit.shown import format_record, printable
from mcp_sampling_proxy.audit.summary import (
    CHECK_COLUMNS,
    TOOL_COLUMNS,
    ServerStats,
    by_replica,
    p50,
    parse_since,
    summarize,
    total_of,
)
from mcp_sampling_proxy.audit.verify import Broken, Verifier
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.paths import default_policy_path, policy_or_default
from mcp_sampling_proxy.config.prices import format_usd
from mcp_sampling_proxy.config.settings import load_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError

PROG = "mcp-sampling-proxy audit"


FILE_HELP = "the audit log (default: audit.path of the policy: --policy, else the default policy file)"


POLICY_HELP = "without FILE: read audit.path from this policy (default: the file `init` writes, when it exists)"


def main(argv: Sequence[str]) -> int:
    parser = Parser(
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


def _render(record: dict[str, Any], as_json: bool) -> str:
    # ensure_ascii escapes every control and non-ASCII character: safe for any terminal
    return json.dumps(record, ensure_ascii=True) if as_json else format_record(record)


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
    rows = [[printable(server, 40), *_numbers(entry)][: len(header)] for server, entry in stats.items()]
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
            [[printable(name, 60), *_numbers(entry)[:4]] for name, entry in replicas.items()],
        )
    for columns, names in tables:  # shown when the log has any: tool decisions, sampling checks' work
        if any(getattr(total, column) for column in columns):
            print()
            print_table(
                list(names),
                [
                    [printable(server, 40), *(str(getattr(e, c)) for c in columns)]
                    for server, e in [*stats.items(), ("total", total)]
                ],
            )
    return 0


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
