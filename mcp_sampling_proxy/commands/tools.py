"""`mcp-sampling-proxy tools list|diff|accept|forget`: the pinned tools of your servers, and held changes.

The pins live in `tools.json` in the state directory (beside the remembered approvals), sealed with
the proxy's key (quotas/tool_pins.py). Running proxies hold a changed tool until it is accepted here;
they see the acceptance at the host's next tools/list.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Sequence
from typing import Any

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.quotas.integrity import start_anew
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.quotas.tool_pins import PINNED_FIELDS, PINS_FILE, PinnedServer, ToolPins, trust_problem
from mcp_sampling_proxy.text.identity import normalise
from mcp_sampling_proxy.text.sanitize import one_line, strip_controls

PROG = "mcp-sampling-proxy tools"
MAX_DIFF_LINES = 400  # per field: a schema rewritten whole is not printed without end


def store() -> ToolPins:
    return ToolPins(state_dir(create=False) / PINS_FILE)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="The tools of your servers as first seen (pinned), and the changes held since: a server "
        "that changes a tool's description or schema (a 'rug pull') has that tool hidden from the host and its "
        "calls refused until you accept the change here (policy: tools.on_change).",
        epilog="SERVER is the operator's name for the server (--name, or derived from its command or URL), as "
        "`tools list` shows it. Running proxies see an acceptance at the host's next tools/list.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="pinned tools and held changes, per server")
    listing.add_argument("server", nargs="?", help="only this server")
    listing.add_argument("--json", action="store_true", help="one JSON object per server")
    diff = sub.add_parser("diff", help="what changed in the held tools: description and schema, as a diff")
    diff.add_argument("server")
    diff.add_argument("tool", nargs="?", help="only this tool")
    accept = sub.add_parser(
        "accept", help="pin the held version of a tool (the one `diff` shows), so the host sees it again"
    )
    accept.add_argument("server")
    accept.add_argument("tool", nargs="?", help="the tool to accept")
    accept.add_argument("--all", action="store_true", help="every held tool of the server")
    forget = sub.add_parser("forget", help="drop a server's pins: its next tools/list is pinned as first seen")
    forget.add_argument("server")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    pins = store()
    problem = trust_problem(pins)
    if problem is not None:
        print(f"{PROG}: the pins cannot be trusted: {problem}", file=sys.stderr)
        print(
            "running proxies hold every tool of every server until this is mended; "
            f"to pin anew from the next tools/list, {start_anew(pins.path)}",
            file=sys.stderr,
        )
        return 1
    try:
        if args.action == "list":
            return list_pins(pins, args.server, args.json)
        if args.action == "diff":
            return show_diff(pins, args.server, args.tool)
        if args.action == "accept":
            return accept(pins, args.server, args.tool, args.all)
        return forget(pins, args.server)
    except OSError as exc:
        print(f"{PROG}: cannot use {pins.path}: {exc.strerror or exc}", file=sys.stderr)
        return 2


def _matching(pins: ToolPins, server: str | None) -> list[PinnedServer]:
    if not pins.path.exists():
        return []
    return [s for s in pins.servers() if server is None or normalise(s.name) == normalise(server)]


def _no_server(pins: ToolPins, server: str) -> int:
    print(f"{PROG}: no pins for a server named '{one_line(server, 80)}' (see `{PROG} list`)", file=sys.stderr)
    return 1


def list_pins(pins: ToolPins, server: str | None, as_json: bool) -> int:
    servers = _matching(pins, server)
    if as_json:
        for s in servers:
            held = {name: entry.get("kind") for name, entry in s.pending.items() if isinstance(entry, dict)}
            print(json.dumps({"server": s.name, "target": s.target, "pinned": sorted(s.tools), "held": held}))
        return 0
    if not servers:
        if server is not None:
            return _no_server(pins, server)
        print(f"no pinned tools yet ({pins.path}): proxies pin a server's tools at its first tools/list")
        return 0
    for s in servers:
        gone = [n for n, e in s.tools.items() if isinstance(e, dict) and e.get("gone")]
        print(f"{one_line(s.name, 80)}  ({one_line(s.target, 120)})")
        print(
            f"  pinned: {len(s.tools)} tool{'s' if len(s.tools) != 1 else ''}"
            + (f", {len(gone)} no longer listed" if gone else "")
        )
        for name in sorted(s.tools):
            entry = s.tools[name]
            mark = " (no longer listed)" if isinstance(entry, dict) and entry.get("gone") else ""
            print(f"    {one_line(name, 80)}{mark}")
        for name, entry in sorted(s.pending.items()):
            kind = entry.get("kind", "changed") if isinstance(entry, dict) else "changed"
            at = entry.get("at", "?") if isinstance(entry, dict) else "?"
            print(
                f"  HELD: {one_line(name, 80)} ({'new tool' if kind == 'new' else 'changed'} since pinned, seen {at})"
            )
        if s.pending:
            print(f"  see the change: {PROG} diff {s.name}; let it through: {PROG} accept {s.name} TOOL (or --all)")
    print(f"\n{pins.path}")
    return 0


def _text(value: Any) -> list[str]:
    if value is None:
        return []
    text = value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return strip_controls(text).splitlines()


def field_diff(tool: str, field: str, old: Any, new: Any) -> list[str]:
    """A unified diff of one field of a tool, cleaned for the terminal and bounded."""
    lines = list(
        difflib.unified_diff(
            _text(old), _text(new), fromfile=f"{tool} {field} (pinned)", tofile=f"{tool} {field} (now)", lineterm=""
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more lines)"]
    return lines


def show_diff(pins: ToolPins, server: str, tool: str | None) -> int:
    servers = _matching(pins, server)
    if not servers:
        return _no_server(pins, server)
    shown = 0
    for s in servers:
        for name, held in sorted(s.pending.items()):
            if (tool is not None and name != tool) or not isinstance(held, dict):
                continue
            shown += 1
            pin = s.tools.get(name)
            pin = pin if isinstance(pin, dict) else {}
            label = one_line(name, 80)
            old_fields, new_fields = pin.get("fields") or {}, held.get("fields") or {}
            changed = [f for f in PINNED_FIELDS if old_fields.get(f) != new_fields.get(f)]
            kind = "new tool (never pinned)" if held.get("kind") == "new" else "changed since pinned"
            print(f"== {one_line(s.name, 80)} / {label}: {kind}; fields: {', '.join(changed) or 'none'}")
            print(f"   pinned sha256 {pin.get('digest') or '-'}\n   now    sha256 {held.get('digest')}")
            old_copy, new_copy = pin.get("copy"), held.get("copy")
            if not isinstance(new_copy, dict) or (pin and not isinstance(old_copy, dict)):
                print("   (a copy was not kept: past the size cap of kept copies, only digests are)")
                continue
            old_copy = old_copy if isinstance(old_copy, dict) else {}
            for field in changed:
                for line in field_diff(label, field, old_copy.get(field), new_copy.get(field)):
                    print(line)
            print()
    if not shown:
        what = f"tool '{one_line(tool, 80)}'" if tool is not None else "tools"
        print(f"no held {what} for server '{one_line(server, 80)}': nothing changed since pinned")
        return 0 if tool is None else 1
    print(f"accept with: {PROG} accept {server} TOOL (or --all)")
    return 0


def accept(pins: ToolPins, server: str, tool: str | None, every: bool) -> int:
    if (tool is None) == (not every):
        print(f"{PROG} accept: give a TOOL, or --all (not both)", file=sys.stderr)
        return 2
    if not _matching(pins, server):
        return _no_server(pins, server)
    done = pins.accept(server, None if every else tool)
    if not done:
        what = f"tool '{one_line(tool, 80)}'" if tool is not None else "tools"
        print(
            f"{PROG} accept: no held {what} for '{one_line(server, 80)}' (see `{PROG} list {server}`)", file=sys.stderr
        )
        return 1
    for s, name in done:
        print(f"accepted: {one_line(s.name, 80)} / {one_line(name, 80)} (pinned as it is now)")
    print("the host sees it again at its next tools/list")
    return 0


def forget(pins: ToolPins, server: str) -> int:
    if not _matching(pins, server):
        return _no_server(pins, server)
    count = pins.forget(server)
    print(f"forgot the pins of {count} server{'s' if count != 1 else ''} named '{one_line(server, 80)}'")
    print("its next tools/list is pinned as first seen")
    return 0
