"""`mcp-sampling-proxy try`: play a host that cannot sample, to exercise a server without one.

It starts the server behind a real proxy process (the same code a host would run), lists the
tools, calls one, and prints the result and what the proxy decided, read from the proxy's
JSON log. Server authors use it to test sampling without Claude Desktop or an API key.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import anyio

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.system.terminal import DEVICE_ENV
from mcp_sampling_proxy.text.sanitize import strip_controls
from mcp_sampling_proxy.transport.stdio_host import StdioHost

DECISION_EVENTS = {
    "sampling request": "request",
    "model chosen": "model",
    "sampling fulfilled": "fulfilled",
    "sampling failed": "failed",
    "sampling not approved": "not approved",
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mcp-sampling-proxy try",
        description="Start a server behind the proxy, as a host without sampling would, call one tool, "
        "and show the result and the proxy's decisions.",
        epilog='example:\n  mcp-sampling-proxy try --tool summarize --args \'{"text": "MCP is a protocol..."}\' '
        "-- python examples/servers/summarizer.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="policy file for the proxy (default: as the proxy's, the file `init` writes when it exists)",
    )
    parser.add_argument("--name", help="server name for policy rules")
    parser.add_argument("--tool", help="tool to call (omit to only list the tools)")
    parser.add_argument("--args", default="{}", metavar="JSON", help="tool arguments as a JSON object")
    parser.add_argument("--no-terminal", action="store_true", help="do not use this terminal for prompts")
    parser.add_argument(
        "--logs",
        action="store_true",
        help="print every line the proxy and the server wrote to stderr (default: the proxy's decisions, "
        "warnings and errors only, and every line when the call fails)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the tool (default 300)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the server command, after '--'")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("mcp-sampling-proxy try: error: give the server command after '--'", file=sys.stderr)
        return 2
    try:
        tool_args = json.loads(args.args)
    except ValueError as exc:
        print(f"mcp-sampling-proxy try: error: --args is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(tool_args, dict):
        print("mcp-sampling-proxy try: error: --args must be a JSON object", file=sys.stderr)
        return 2
    if os.sep not in command[0] and shutil.which(command[0]) is None:
        print(
            f"mcp-sampling-proxy try: error: command '{strip_controls(command[0])}' not found on PATH: give the "
            "server's command as you would run it yourself, e.g. `-- .venv/bin/python server.py` or "
            "`-- npx -y @modelcontextprotocol/server-everything`",
            file=sys.stderr,
        )
        return 2

    # debug: the request, the model chosen and the fulfilment are debug lines (info only logs what a human sees)
    proxy = [sys.executable, "-m", "mcp_sampling_proxy", "--log-format", "json", "--log-level", "debug"]
    if args.policy:
        proxy += ["--policy", args.policy]
    if args.name:
        proxy += ["--name", args.name]
    if args.no_terminal:
        proxy.append("--no-terminal")
    env = dict(os.environ)
    device = _terminal_device()
    if device and not args.no_terminal:
        env[DEVICE_ENV] = device

    with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
        try:
            outcome = anyio.run(_session, [*proxy, "--", *command], env, args.tool, tool_args, errlog, args.timeout)
        except Exception as exc:
            outcome = (1, f"error: {_ended_early(_describe_exception(exc))}")
        errlog.seek(0)
        _print_proxy_log(errlog.read(), verbose=args.logs or outcome[0] != 0)
    sys.stderr.flush()
    print(outcome[1], flush=True)
    return outcome[0]


async def _session(
    command: list[str], env: dict[str, str], tool: str | None, tool_args: dict[str, Any], errlog: Any, timeout: float
) -> tuple[int, str]:
    with anyio.fail_after(timeout):
        async with StdioHost.start(command, env, errlog) as host:
            names = [str(t.get("name")) for t in await host.list_tools()]
            print("tools: " + ", ".join(strip_controls(name) for name in names), flush=True)  # the server's names
            if tool is None:
                return 0, "(no --tool given: nothing called)"
            if tool not in names:
                return 2, f"error: the server has no tool '{tool}'"
            result = await host.call_tool(tool, tool_args)
    blocks = [block for block in result.get("content") or [] if isinstance(block, dict)]
    texts = [strip_controls(str(b["text"]) if "text" in b else f"[{b.get('type')} content]") for b in blocks]
    failed = result.get("isError") is True
    return (1 if failed else 0), ("tool error" if failed else "result") + ":\n" + "\n".join(texts)


def _print_proxy_log(text: str, *, verbose: bool) -> None:
    """Summarise the proxy's decisions; with verbose, every stderr line too."""
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            if verbose:
                print("  " + strip_controls(line), file=sys.stderr)
            continue
        event = record.get("event", "")
        label = DECISION_EVENTS.get(event)
        if label is None and not (verbose or record.get("level") in ("warning", "error")):
            continue
        details = ", ".join(
            f"{k}={strip_controls(str(v))}"
            for k, v in record.items()
            if k not in ("event", "level", "timestamp") and v is not None  # unset: nothing to say
        )
        print(f"proxy: {label or event}" + (f" ({details})" if details else ""), file=sys.stderr)


def _terminal_device() -> str | None:
    for stream in (sys.stdin, sys.stderr, sys.stdout):
        try:
            if stream.isatty():
                return os.ttyname(stream.fileno())
        except (OSError, ValueError):
            continue
    return None


def _ended_early(what: str) -> str:
    """The words for a stdio session whose other end went away, said as what happened."""
    if what == "Connection closed":
        return "the proxy or the server ended before the session was done (their last words are above)"
    return what


def _describe_exception(exc: BaseException) -> str:
    """Unwrap task-group exception groups into the first real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return strip_controls(str(exc) or type(exc).__name__)
