"""`serve` played in process: the endpoint its options build (commands/serve.py's `check_setup` and
`Setup.front`, as the command builds it), driven through httpx's ASGI transport. Nothing is bound and no
process is started: a test under tests/unit can use it.

What plays here is what `serve` decides before a client session exists: a token refused (--token-file's
401s, the OAuth guard's 401, 403, 503), the protected-resource metadata, the Host and Origin checks on
loopback, a request without a session or for an unknown one, an unsupported MCP-Protocol-Version, a body
too large, a 2026-07-28 request refused before its caller's server starts. A request that opens a session
(or a 2026-07-28 caller's lane) starts a server, and belongs in tests/e2e.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from helpers.support import KITCHEN_SINK, PY
from mcp_sampling_proxy.commands.serve import DEFAULT_LISTEN, Setup, check_setup
from mcp_sampling_proxy.front.endpoint import ENDPOINT, Front
from mcp_sampling_proxy.log import configure

ORIGIN = f"http://{DEFAULT_LISTEN}"  # serve's default --listen: only named, never bound
URL = ORIGIN + ENDPOINT  # the OAuth resource without --oauth-resource: what tokens are minted for
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
NO_SUCH_SESSION = "Not Found: no such session (it ended, or expired): initialize again"


@dataclass
class PlayedServe:
    """One endpoint built from serve's options, and an HTTP client bound to its ASGI app."""

    front: Front
    http: httpx.AsyncClient
    url: str = URL
    origin: str = ORIGIN  # http://HOST:PORT of its --listen: the Host (and Origin) it answers as its own

    async def initialize(self, token: str | None) -> httpx.Response:
        """An initialize POST, with `Authorization: Bearer TOKEN` unless `token` is None. Only send one the
        endpoint refuses: one it takes would start the session's server."""
        return await self.http.post(ENDPOINT, json=INITIALIZE, headers=_headers(token))

    async def past_the_guard(self, token: str) -> httpx.Response:
        """A request in a session that does not exist: once the token is taken it gets the 404 of an unknown
        session (NO_SUCH_SESSION), and a refused token gets the refusal. Nothing is started either way."""
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        headers = {**_headers(token), "Mcp-Session-Id": "no-such-session"}
        return await self.http.post(ENDPOINT, json=listing, headers=headers)


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    return headers if token is None else {**headers, "Authorization": f"Bearer {token}"}


@asynccontextmanager
async def played_serve(*options: str, environ: Mapping[str, str] | None = None) -> AsyncIterator[PlayedServe]:
    """`serve OPTIONS -- python kitchen_sink_server.py` built as the command builds it (its checks, its
    OAuth discovery, its policy), on the default --listen; closed as `serve` closes it when it stops. Its
    warnings go to stderr as JSON lines, as `serve --log-format json` writes them (pytest's capsys reads
    them)."""
    configure("warning", "json")
    setup = check_setup([*options, "--", PY, KITCHEN_SINK], os.environ if environ is None else environ)
    front = setup.front()
    origin = listened_origin(setup)
    try:
        transport = httpx.ASGITransport(app=front.app)
        async with httpx.AsyncClient(transport=transport, base_url=origin, timeout=15) as http:
            yield PlayedServe(front, http, origin + ENDPOINT, origin)
    finally:
        if setup.guard is not None:
            await setup.guard.aclose()
        await front.adapters.aclose()
        front.audit.close()


def listened_origin(setup: Setup) -> str:
    """http://HOST:PORT of the --listen given (only named, never bound): requests carry it as their Host, as
    a client of that address would."""
    host = f"[{setup.host}]" if ":" in setup.host else setup.host
    return f"http://{host}:{setup.port}"
