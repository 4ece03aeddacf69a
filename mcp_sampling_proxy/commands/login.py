"""`mcp-sampling-proxy login --url URL` / `logout --url URL`: the browser part of OAuth, once, from a terminal.

A host spawns the proxy with no terminal and no way to show a browser, so the interactive step
happens here: discover the server's authorization server, register (or use --client-id), send the
user's browser to the authorization page (PKCE), take the code on a one-shot listener on
127.0.0.1 (front/login_callback.py), and store the tokens where the proxy will find them (see transport/oauth_store).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
from mcp.shared.auth import AuthorizationCodeResult

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.front import login_callback
from mcp_sampling_proxy.system.browser import open_url
from mcp_sampling_proxy.transport import oauth_store
from mcp_sampling_proxy.transport.http import parse_headers
from mcp_sampling_proxy.transport.oauth import LoginFailed, authorize

PROG = "mcp-sampling-proxy"


def build_parser(action: str) -> argparse.ArgumentParser:
    parser = Parser(
        prog=f"{PROG} {action}",
        description="Log in to an OAuth-protected Streamable HTTP server once, from a terminal; the proxy "
        "then uses and refreshes the stored tokens."
        if action == "login"
        else "Forget the stored OAuth login of a Streamable HTTP server.",
    )
    parser.add_argument("--url", required=True, help="the server's MCP endpoint, exactly as the proxy's --url")
    if action == "logout":
        return parser
    parser.add_argument(
        "--client-id",
        help="a client id registered with the authorization server beforehand (default: dynamic client registration)",
    )
    parser.add_argument(
        "--client-secret-env",
        metavar="VAR",
        help="environment variable holding the pre-registered client's secret, if it has one",
    )
    parser.add_argument("--scope", help="scopes to ask for, space-separated (default: what the server names)")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="loopback port for the redirect (default: any free port; a pre-registered client may "
        "need the port it was registered with: redirect URI http://127.0.0.1:PORT/callback)",
    )
    parser.add_argument("--no-open", action="store_true", help="print the URL but do not open a browser")
    parser.add_argument(
        "--store",
        choices=("auto", "file", "keyring"),
        default="auto",
        help="where tokens go: the OS keyring when usable, else a 0600 file in the state dir (auto)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'K: V'",
        help="extra HTTP header for the server (repeatable; ${VAR} expanded), as for the proxy",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the browser to come back (default: 300)"
    )
    return parser


def main(argv: Sequence[str], action: str = "login") -> int:
    args = build_parser(action).parse_args(list(argv))
    if action == "logout":
        removed = oauth_store.delete(args.url)
        if not removed:
            print(f"{PROG} logout: no stored login for {oauth_store.canonical_url(args.url)}")
            return 0
        print(f"{PROG} logout: removed the login for {oauth_store.canonical_url(args.url)} from {', '.join(removed)}")
        return 0
    try:
        return _login(args)
    except KeyboardInterrupt:
        print(f"\n{PROG} login: interrupted; nothing stored", file=sys.stderr)
        return 130


def _login(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"{PROG} login: error: {message}", file=sys.stderr)
        return 1

    try:
        headers = parse_headers(args.header, os.environ)
    except ValueError as exc:
        return fail(str(exc))
    secret = None
    if args.client_secret_env:
        secret = os.environ.get(args.client_secret_env)
        if not secret:
            return fail(f"--client-secret-env {args.client_secret_env} is not set in the environment")
    kind: oauth_store.StoreKind
    if args.store == "auto":
        kind = "keyring" if oauth_store.keyring_usable() else "file"
    elif args.store == "keyring" and not oauth_store.keyring_usable():
        return fail(
            "--store keyring: the OS keyring is not usable here (install `keyring` and a backend, or use --store file)"
        )
    else:
        kind = args.store
    try:
        sock = login_callback.listen(args.port)
    except OSError as exc:
        return fail(f"cannot listen on 127.0.0.1:{args.port} for the redirect: {exc}")
    try:
        record, server_name = anyio.run(_authorize, args, sock, secret, headers)
    except LoginFailed as exc:
        return fail(str(exc))
    try:
        where = oauth_store.save(args.url, record, kind)
    except OSError as exc:
        return fail(f"logged in, but the tokens could not be stored: {exc}")
    named = f" ({server_name})" if server_name else ""
    print(f"logged in to {oauth_store.canonical_url(args.url)}{named}; tokens stored in {where}")
    print(
        f"the proxy (`{PROG} --url {args.url}`) uses and refreshes them; `{PROG} logout --url {args.url}` forgets them"
    )
    return 0


async def _authorize(
    args: argparse.Namespace, sock: socket.socket, secret: str | None, headers: dict[str, str]
) -> tuple[dict[str, Any], str]:
    """The browser's round trip, with the redirect's listener open for as long as it takes."""
    async with login_callback.callback_listener(sock, say=_say) as listener:
        state: str | None = None

        async def show(url: str) -> None:
            nonlocal state
            state = (parse_qs(urlparse(url).query).get("state") or [""])[0] or None
            _say(f"open this URL in your browser to log in to {urlparse(args.url).netloc}:\n\n  {url}\n")
            if not args.no_open and not await anyio.to_thread.run_sync(open_url, url):
                _say("(could not open a browser: open the URL yourself)")
            _say(f"waiting for the browser to come back to {listener.redirect_uri} ...")

        async def wait_for_code() -> AuthorizationCodeResult:
            return await listener.code(state, args.timeout)

        return await authorize(
            args.url,
            redirect_uri=listener.redirect_uri,
            open_url=show,
            wait_for_code=wait_for_code,
            client_id=args.client_id,
            client_secret=secret,
            scope=args.scope,
            headers=headers,
        )


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
