"""`mcp-sampling-proxy console`: approve sampling requests of every running proxy from one terminal.

Attaches to each proxy's socket in the user's runtime dir (and to proxies started later), shows
each pending request (server, tool call, messages, system prompt, preferences, tools) and asks:
approve once, for this session, always for this server and tool, edit the prompt, or deny.
A socket is used only when the process serving it has the pid its name says and does not run below a
proxy: a governed server could plant a socket of its own to phish the user. The screen itself (what is
shown, and how a question that closes elsewhere is taken off) is approval/terminal_console.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc

from mcp_sampling_proxy.approval.console.server import RuntimeDirError, runtime_dir
from mcp_sampling_proxy.approval.terminal_console import Console
from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.config.settings import Settings, load_settings
from mcp_sampling_proxy.log import configure, get_logger
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.system.listening import listen_failure

log = get_logger("mcp_sampling_proxy.console")


def main(argv: Sequence[str]) -> int:
    configure("warning", "console")  # stdout is the conversation with the user; logs go to stderr

    parser = Parser(
        prog="mcp-sampling-proxy console",
        meant={"--listen": "--web --port PORT (the console's page listens on 127.0.0.1 only)"},
        description="Approve the sampling requests of every running mcp-sampling-proxy of this user from this "
        "terminal (for hosts such as Claude Desktop that start the proxy without one).",
    )
    web = parser.add_argument_group("in a browser")
    web.add_argument(
        "--web",
        action="store_true",
        help="serve the console as a page on 127.0.0.1 instead: the first line printed is its URL, with a secret token",
    )
    web.add_argument("--port", type=int, default=0, help="port for --web (default: a free one)")
    web.add_argument("--no-open", action="store_true", help="with --web: print the URL, do not open a browser")
    web.add_argument(
        "--audit", metavar="FILE", help="with --web: the audit log to tail (default: the policy's audit.path)"
    )
    web.add_argument(
        "--policy",
        metavar="FILE",
        help="with --web: the policy whose budgets and limits to show "
        "(default: ~/.config/mcp-sampling-proxy/policy.yaml when it exists)",
    )
    args = parser.parse_args(list(argv))
    if not args.web and (args.port or args.no_open or args.audit or args.policy):
        parser.error("--port, --no-open, --audit and --policy go with --web")
    try:
        directory = runtime_dir()
    except RuntimeDirError as exc:
        print(f"mcp-sampling-proxy console: error: {exc}", file=sys.stderr)
        return 1
    if args.web:
        return web_console(
            directory, port=args.port, open_browser=not args.no_open, policy=args.policy, audit=args.audit
        )

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            await Console(directory).run(tg)

    try:
        anyio.run(run)
    except (KeyboardInterrupt, EOFError):
        # one Ctrl-C (or Ctrl-D) quits, also at a prompt: each proxy sees its console go and sends the
        # question to its next approval channel, or denies it
        print("\nconsole closed: pending requests go to each proxy's next approval channel, or are denied", flush=True)
        sys.stderr.flush()
        # A prompt's reader thread may still be blocked in stdin.readline(), holding stdin's lock, and
        # the interpreter's shutdown would wait for that lock (a second Ctrl-C): leave at once instead.
        os._exit(0)
    return 0


CLOSED_LINE = "console closed: pending requests go to each proxy's next approval channel, or are denied"


def default_policy() -> str | None:
    """The user's policy when it sits where `init` writes it (see config.paths)."""
    return policy_or_default(None)[0]


def web_console(directory: Path, *, port: int, open_browser: bool, policy: str | None, audit: str | None) -> int:
    """`console --web`: run the page until Ctrl-C or SIGTERM; the first line on stdout is its URL with its token."""
    # start-up: the page's server pulls in uvicorn and Starlette, which only --web needs
    from mcp_sampling_proxy.approval.console.client import ConsoleClient as Client
    from mcp_sampling_proxy.front.web_console.app import WebConsole
    from mcp_sampling_proxy.front.web_console.server import HOST, listen, page_sources, run

    settings: Settings | None = None
    named = policy or default_policy()
    if named:
        try:
            settings = load_settings(named)
        except PolicyError as exc:
            if policy:  # the file the user named: say what is wrong with it
                print(f"mcp-sampling-proxy console: error: {exc}", file=sys.stderr)
                return 2
            # the default policy only feeds the budgets shown: approvals must not wait for a fix
            print(
                f"mcp-sampling-proxy console: warning: the default policy cannot be read, so no budgets or "
                f"limits are shown: {exc}",
                file=sys.stderr,
            )
    sources = page_sources(settings, audit)
    for warning in sources.warnings:
        print(f"mcp-sampling-proxy console: warning: {warning}", file=sys.stderr)
    try:
        listener = listen(port)
    except OSError as exc:
        problem = listen_failure(HOST, port, exc, lambda free: f"--port {free}")
        print(f"mcp-sampling-proxy console: error: {problem} (--port 0 picks a free one)", file=sys.stderr)
        return 1
    state = sources.state
    web = WebConsole(state, Client(directory, state.on_event), listener.getsockname()[1])
    print(web.url, flush=True)
    print(
        f"mcp-sampling-proxy console: serving approvals for the proxies in {directory} at the URL above "
        f"(audit: {state.audit_path or 'none; pass --audit FILE'}; Ctrl-C to quit)",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):  # a Ctrl-C before the server took the signals over
        run(web, listener, open_browser=open_browser)
    print(CLOSED_LINE, file=sys.stderr, flush=True)
    return 0
