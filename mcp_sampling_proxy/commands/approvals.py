"""`mcp-sampling-proxy approvals list|revoke`: the remembered "always" approvals.

They live in `approvals.json` in the state directory, shared by all the user's proxies, which read
it on every request: a revoked approval is asked again at the next request, also by proxies that
are already running.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TypedDict

from mcp_sampling_proxy.approval.memory import APPROVAL, always_entries, always_key, entry_is_sealed
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.quotas.integrity import KEY_FILE, load_key
from mcp_sampling_proxy.quotas.state import Approvals, StateFile, approvals_file, state_dir
from mcp_sampling_proxy.text.identity import normalise
from mcp_sampling_proxy.text.sanitize import one_line

PROG = "mcp-sampling-proxy approvals"


def store() -> StateFile[Approvals]:
    return approvals_file(state_dir(create=False) / "approvals.json")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="List or revoke the approvals remembered with "
        "'always' (per server and tool, shared by all your proxies).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="show them, numbered")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    revoke = sub.add_parser(
        "revoke",
        help="forget some: by number (as `list` shows), or by server, or all",
        epilog="the next request of that server and tool is asked again, also in proxies already running",
    )
    revoke.add_argument("numbers", nargs="*", type=int, metavar="N", help="numbers from `approvals list`")
    revoke.add_argument("--server", help="every approval of this server (its name as `list` shows it)")
    revoke.add_argument("--tool", help="with --server: only this tool's")
    revoke.add_argument("--all", action="store_true", help="every remembered approval")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        if args.action == "list":
            return list_approvals(args.json)
        return revoke(args)
    except OSError as exc:
        print(f"{PROG}: cannot use {store().path}: {exc.strerror or exc}", file=sys.stderr)
        return 2


class ApprovalRow(TypedDict):
    """One remembered approval as `approvals list` shows it (and prints it, with --json)."""

    server: str
    tool: str | None
    rule: object  # as the file holds them: trusted only when `trusted`
    at: object
    channel: object
    trusted: bool  # its seal verifies: a proxy wrote it


def _row(entry: object, seal: bytes | None) -> ApprovalRow:
    key = always_key(entry)
    server, tool = key if key is not None else ("?", "?")
    extra = entry if isinstance(entry, dict) else {}
    return {
        "server": server,
        "tool": tool or None,
        "rule": extra.get("rule"),
        "at": extra.get("at"),
        "channel": extra.get("channel"),
        "trusted": seal is not None and entry_is_sealed(seal, APPROVAL, entry),
    }


def _seal() -> bytes | None:
    """The proxy's sealing key, when there is one (listing never makes one)."""
    directory = store().path.parent
    if not (directory / KEY_FILE).exists():
        return None
    try:
        return load_key(directory)
    except OSError:
        return None


def list_approvals(as_json: bool) -> int:
    path = store().path
    seal = _seal()
    rows = [_row(e, seal) for e in always_entries(store().read())] if path.exists() else []
    if as_json:
        for number, row in enumerate(rows, 1):
            print(json.dumps({"n": number, **row}))
        return 0
    if not rows:
        print(f"no remembered approvals ({path})")
        return 0
    table: list[list[str]] = [["#", "server", "tool", "rule", "when", "by", "trusted"]] + [
        [
            str(n),
            *(
                one_line(str(v), 60)
                for v in (
                    r["server"],
                    r["tool"] or "(no tool call)",
                    r["rule"] or "-",
                    r["at"] or "(before it was recorded)",
                    r["channel"] or "-",
                    "yes" if r["trusted"] else "NO: not written by a proxy, ignored",
                )
            ),
        ]
        for n, r in enumerate(rows, 1)
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    print(f"\n{path}; revoke with: {PROG} revoke N (or --server NAME, or --all)")
    return 0


def revoke(args: argparse.Namespace) -> int:
    chosen = sum(bool(x) for x in (args.numbers, args.server, args.all))
    if chosen != 1 or (args.tool and not args.server):
        print(
            f"{PROG} revoke: give approval numbers (from `approvals list`), or --server NAME [--tool NAME], or --all",
            file=sys.stderr,
        )
        return 2
    if not store().path.exists():
        print(f"{PROG} revoke: no remembered approvals ({store().path})", file=sys.stderr)
        return 1
    problem: list[str] = []

    def drop(data: Approvals) -> list[object]:
        entries = always_entries(data)
        if args.numbers:
            bad = [n for n in args.numbers if not 1 <= n <= len(entries)]
            if bad:
                problem.append(
                    f"no approval numbered {', '.join(map(str, bad))} (there are {len(entries)}; see `{PROG} list`)"
                )
                return []
            gone = [entries[n - 1] for n in sorted(set(args.numbers))]
        elif args.server:
            server, tool = normalise(args.server), args.tool
            gone = [
                e
                for e in entries
                if (key := always_key(e)) is not None and key[0] == server and (tool is None or key[1] == tool)
            ]
        else:
            gone = list(entries)
        data["always"] = [e for e in entries if not any(e is g for g in gone)]
        return gone

    gone = store().update(drop)
    if problem:
        print(f"{PROG} revoke: {problem[0]}; nothing revoked", file=sys.stderr)
        return 1
    if not gone:
        print(f"{PROG} revoke: nothing matched; nothing revoked (see `{PROG} list`)", file=sys.stderr)
        return 1
    for entry in gone:
        row = _row(entry, None)
        print(
            f"revoked: {one_line(row['server'], 60)} / {one_line(row['tool'] or '(no tool call)', 60)}"
            f" (rule {row['rule'] or '-'}, {row['at'] or 'date not recorded'})"
        )
    print("the next such request is asked again, also in proxies already running")
    return 0
