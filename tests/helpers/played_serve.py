"""`serve` played in process: the endpoint its options build (commands/serve.py's `check_setup` and
`Setup.front`, as the command builds it), driven through httpx's ASGI transport. Nothing is bound and no
process is started: a test under tests/unit can use it.

What plays here is what `serve` decides before a client session exists: a token refused (--token-file's
401s, the OAuth guard's 401, 403, 503), the protected-resource metadata, the Host and Origin checks on
loopback, a request without a session or for an unknown one, an unsupported MCP-Protocol-Version, a body
too large, a 2026-07-28 request refused before its caller's server starts.

`played_sessions` plays the sessions too: the front's `start_upstream` gives each session (and 2026-07-28
caller's lane) a server played in memory (helpers/played_server.py), and the app runs in `Front.running()`
as `serve` runs it, its HTTP streamed (`StreamingASGI`: an SSE answer arrives as it is written, a dropped
connection is a disconnect), so the SDK's real Client can talk to it (`client`). Nothing is bound but the
companion console's socket in the test's runtime dir; what needs a process (the server's start and end,
signals, the listening socket, the command's exit) stays in tests/e2e.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import AsyncIterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from helpers.played_server import Gates, PlayedServer, Script
from helpers.support import KITCHEN_SINK, PY
from mcp_sampling_proxy.commands.serve import DEFAULT_LISTEN, Setup, check_setup
from mcp_sampling_proxy.front.endpoint import ENDPOINT, Front
from mcp_sampling_proxy.log import configure
from mcp_sampling_proxy.runtime import Upstream

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


# -- whole sessions, their servers played in memory -----------------------------------------------------------


class StreamingASGI(httpx2.AsyncBaseTransport):
    """httpx2's transport to an ASGI app in this process that streams: the response is handed over when the app
    starts it, its body as the app writes it (httpx2's own ASGITransport waits for the whole body, which an
    SSE stream never ends); closing the response early is the client's disconnect, and `cut()` cuts every
    response being read, as a network does (the client's read fails, the app sees a disconnect)."""

    def __init__(self, app: Any, tg: anyio.abc.TaskGroup) -> None:
        self._app, self._tg = app, tg
        self._open: set[_Body] = set()
        self.cuts = 0

    def cut(self) -> None:
        self.cuts += 1
        for body in list(self._open):
            body.cut()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for (k, v) in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": ("127.0.0.1", 50000),
            "root_path": "",
        }
        started = anyio.Event()
        head: list[Any] = []
        chunks, chunks_out = anyio.create_memory_object_stream[bytes | None](math.inf)
        gone = anyio.Event()
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                head[:] = [message["status"], message.get("headers", [])]
                started.set()
            elif message["type"] == "http.response.body":
                if message.get("body") and not gone.is_set():
                    chunks.send_nowait(message["body"])
                if not message.get("more_body", False):
                    chunks.close()

        async def run() -> None:
            try:
                await self._app(scope, receive, send)
            finally:
                chunks.close()
                started.set()

        self._tg.start_soon(run)
        await started.wait()
        assert head, "the app ended without an answer"
        answer = _Body(chunks, chunks_out, gone, self._open)
        return httpx2.Response(head[0], headers=head[1], stream=answer, request=request)


class _Body(httpx2.AsyncByteStream):
    """A response's body as the app writes it; None in it is the cut."""

    def __init__(self, chunks: Any, chunks_out: Any, gone: anyio.Event, open_bodies: set[_Body]) -> None:
        self._chunks, self._out, self._gone, self._open = chunks, chunks_out, gone, open_bodies
        open_bodies.add(self)

    def cut(self) -> None:
        self._gone.set()
        with contextlib.suppress(anyio.ClosedResourceError):
            self._chunks.send_nowait(None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._out:
            if chunk is None:
                raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
            yield chunk

    async def aclose(self) -> None:
        self._open.discard(self)
        self._gone.set()
        self._out.close()


@dataclass
class PlayedSessions:
    """`serve` with its sessions, each with a server played in memory. `servers`: every server started, in
    order; `http`: an httpx2 client of the app (no token of its own)."""

    front: Front
    http: httpx2.AsyncClient
    transport: StreamingASGI
    servers: list[PlayedServer] = field(default_factory=list)
    url: str = URL
    gates: Gates = field(default_factory=Gates)  # the pausing tools' gates (helpers/played_server.py)

    def running(self) -> list[PlayedServer]:
        return [server for server in self.servers if server.running]

    @asynccontextmanager
    async def client(self, token: str | None, *, mode: str = "legacy", **kwargs: Any) -> AsyncIterator[Client]:
        """The SDK's Client over its Streamable HTTP transport (handshake era unless `mode="auto"`), with
        `Authorization: Bearer TOKEN`."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(transport=self.transport, headers=headers, timeout=30) as http,
            Client(streamable_http_client(self.url, http_client=http), mode=mode, **kwargs) as client,
        ):
            yield client

    def audit(self) -> list[dict[str, Any]]:
        """The decision records written so far (those a writer thread still holds included)."""
        self.front.audit.settle()
        path = Path(self.front.settings.audit.path or os.devnull)
        if not path.is_file():
            return []
        records = (json.loads(line) for line in path.read_text().splitlines())
        return [record for record in records if record.get("event") == "decision"]

    async def initialize(self, token: str) -> httpx2.Response:
        """A raw initialize POST with `token`: it opens a session (its server starts)."""
        return await self.http.post(ENDPOINT, json=INITIALIZE, headers=_headers(token))


@asynccontextmanager
async def played_sessions(
    *options: str, policy: str | None = None, script: Script | None = None, url: str | None = None
) -> AsyncIterator[PlayedSessions]:
    """`serve [--policy POLICY] OPTIONS -- python kitchen_sink_server.py` built as the command builds it, its
    sessions run as `serve` runs them, each session's server the kitchen-sink played in memory (or `script`).
    With `url`, `serve ... --url URL`: each session (or the shared one) reaches that server over HTTP as
    serve's own `--url` sessions do (helpers/serving.py `HttpMcpThread` serves one from a thread).
    Its log goes to stderr as JSON lines (capsys reads them)."""
    configure("info", "json")
    upstream = ["--", PY, KITCHEN_SINK] if url is None else ["--url", url]
    argv = [*(["--policy", policy] if policy is not None else []), *options, *upstream]
    setup = check_setup(argv, os.environ)
    async with anyio.create_task_group() as tg:
        servers: list[PlayedServer] = []
        gates = Gates()

        def start() -> Upstream:
            server = PlayedServer(tg, setup.name, script, gates)
            servers.append(server)
            return server

        front = setup.front(start_upstream=start if url is None else None)
        origin = listened_origin(setup)
        transport = StreamingASGI(front.app, tg)
        async with front.running(), httpx2.AsyncClient(transport=transport, base_url=origin, timeout=15) as http:
            yield PlayedSessions(front, http, transport, servers, origin + ENDPOINT, gates)
        tg.cancel_scope.cancel()
