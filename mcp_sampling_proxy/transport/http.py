"""The real server at a Streamable HTTP URL, through the SDK's client transport.

The transport speaks in parsed messages, so lines are validated on the way in and dumped on
the way out (unknown envelope keys do not survive this hop; that is the SDK's limit). The
transport does not know the negotiated protocol version, so every message is stamped with
`MCP-Protocol-Version`, and 2026-era requests also with `Mcp-Method`/`Mcp-Name`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import anyio
import httpx2  # the SDK's HTTP client (this module is imported for --url, serve and login only)

from mcp_sampling_proxy import log as logmod
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.names import PROTOCOL_VERSION_META
from mcp_sampling_proxy.transport import oauth_store
from mcp_sampling_proxy.transport.framing import DEFAULT_MAX_LINE
from mcp_sampling_proxy.transport.oauth_store import login_command
from mcp_sampling_proxy.transport.param_headers import (
    NAME_BEARING_METHODS,
    encode_header_value,
    header_map,
    param_headers,
)
from mcp_sampling_proxy.transport.streamable_http import StreamableHttpClient

log = get_logger("mcp_sampling_proxy.upstream")


def add_secret(value: str) -> None:
    """OAuth tokens join the values every log line is scrubbed of."""
    logmod.add_secret(value)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def parse_headers(specs: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """'K: V' strings to a dict, with ${VAR} expanded from the environment."""
    headers: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {spec!r} is not 'Name: value'")

        def expand(match: re.Match[str], header: str = name.strip()) -> str:
            var = match.group(1)
            if var not in environ:
                raise ValueError(f"--header {header!r} uses ${{{var}}}, which is not set in the environment")
            return environ[var]

        headers[name.strip()] = _ENV_REF.sub(expand, value.strip())
    return headers


CONNECT_TIMEOUT = 30.0  # s for a connection, a write, a pooled connection
READ_TIMEOUT = 300.0  # s between bytes of an answer (an event stream may be quiet for long)


class LazyOAuth(httpx2.Auth):
    """OAuth only once it is needed: the `mcp` SDK's OAuth (and with it the whole SDK, half a second of
    imports) is loaded when a login is stored for the server, or when the server first answers 401.
    A server that needs no login costs nothing; a 401 is handed to the real flow, which retries the
    request with a stored login or records that the user must run `login` (transport/oauth.py)."""

    def __init__(self, url: str):
        self.url = url
        self.provider: Any = None
        if oauth_store.load(url) is not None:
            self.provider = self._real()

    def _real(self) -> Any:
        from mcp_sampling_proxy.transport.oauth import HeadlessOAuth  # start-up: the mcp SDK, ~0.5 s (above)

        return HeadlessOAuth(self.url, on_secret=add_secret)

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.provider is None:
            response = yield request
            if response.status_code != 401:
                return
            self.provider = self._real()
        flow = self.provider.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


class HttpUpstream:
    """Same surface as StdioUpstream: attach, send, wait, stop."""

    reader = None
    writer = None

    def __init__(self, url: str, headers: dict[str, str], oauth: bool = True):
        self.url = url
        self.label = url
        self._headers = headers
        # OAuth only when the user gave no Authorization header of their own (a static token wins)
        self._oauth = oauth and not any(k.lower() == "authorization" for k in headers)
        self._auth: LazyOAuth | None = None
        self._refusal_logged: str | None = None
        self._outbox_send, self._outbox_recv = anyio.create_memory_object_stream[bytes](1024)
        self._closed = anyio.Event()
        self._version: str | None = None
        self._failure: str | None = None
        self._listing: set[Any] = set()  # ids of tools/list requests on their way
        self._initializing: set[Any] = set()  # ids of initialize requests on their way
        self._param_headers: dict[str, Any] = {}  # tool name -> its x-mcp-header map (SEP-2243)
        self._session: StreamableHttpClient | None = None

    async def attach(
        self,
        on_line: Callable[[bytes], None],
        on_eof: Callable[[], None],
        *,
        max_line: int | None = None,
        on_oversize: Any = None,
    ) -> None:
        """`max_line` bounds a message from the server here too: an SSE event (the SDK's limit, 1 MiB
        by default, refused results a direct host gets) and a JSON response body. Past it the waiting
        request gets an error from the transport; `on_oversize` is for pipes."""
        self._on_line = on_line
        self._on_eof = on_eof
        self._max_message = max_line or DEFAULT_MAX_LINE
        self._scope = anyio.CancelScope()  # created here: anyio needs the running loop
        # A task of its own (the proxy runs on asyncio): a task group entered here and left in
        # stop() would sit on the caller's cancel-scope stack in between and break its nesting.
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, line: bytes) -> None:
        try:
            self._outbox_send.send_nowait(line)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.warning("upstream outbox full or closed; message dropped", size=len(line))

    async def _run(self) -> None:
        if self._oauth:
            self._auth = LazyOAuth(self.url)
        # no compression: a client inflates a body whole, past any count of the bytes that arrive
        headers = {"Accept-Encoding": "identity", **self._headers}
        client = httpx2.AsyncClient(
            headers=headers,
            auth=self._auth,
            follow_redirects=False,
            timeout=httpx2.Timeout(CONNECT_TIMEOUT, read=READ_TIMEOUT),
        )
        try:
            with self._scope:
                async with client, anyio.create_task_group() as tg:
                    session = self._session = StreamableHttpClient(
                        self.url,
                        client,
                        self._from_server,
                        max_message=self._max_message,
                        tg=tg,
                        on_unreachable=self._unreachable,
                        on_error_response=self._login_error,
                    )
                    async for line in self._outbox_recv:
                        try:
                            message = jsonrpc.parse(line)
                        except ValueError as exc:
                            log.warning("message for the HTTP upstream is not valid JSON; dropped", error=str(exc))
                            continue
                        if isinstance(message, dict):
                            await session.send(message, line, self._stamp(message))
                    # stop() closed the outbox: everything queued is sent, so end the session now
                    await session.close()
                    tg.cancel_scope.cancel()
        except Exception as exc:
            self._failure = f"failed ({_describe(exc)})"
            log.error("upstream HTTP transport failed", url=self.url, error=_describe(exc), exc_info=exc)
        finally:
            self._closed.set()
            self._on_eof()

    def _unreachable(self, cause: BaseException) -> None:
        """The server cannot be reached: the session is over (the relay answers what is open)."""
        if self._failure is None:
            self._failure = f"could not be reached at {self.url} ({_describe(cause)})"
            log.error("upstream HTTP server unreachable", url=self.url, error=_describe(cause))
        self._scope.cancel()

    def _from_server(self, line: bytes) -> None:
        if self._initializing or self._listing:  # an answer the upstream itself must read (rare: parse it)
            try:
                message = jsonrpc.parse(line)
            except ValueError:
                message = None
            if isinstance(message, dict):
                self._note_version(message)
                self._note_tools(message)
        self._on_line(line)

    def _login_error(self, request_id: Any, error: dict[str, Any]) -> bytes | None:
        """An error for a request the server refused for lack of an OAuth login becomes one that says
        how to log in."""
        auth = self._auth.provider if self._auth is not None else None
        if auth is None or not auth.refused_ids or request_id not in auth.refused_ids:
            return None
        auth.refused_ids.discard(request_id)
        why = auth.refusal or f"{self.url} needs an OAuth login"
        if why != self._refusal_logged:
            self._refusal_logged = why
            log.error("upstream needs an OAuth login; requests get an error until then", url=self.url, why=why)
        return jsonrpc.error_response(request_id, jsonrpc.INTERNAL_ERROR, why, data={"login": login_command(self.url)})

    def _note_version(self, message: dict[str, Any]) -> None:
        """The negotiated version comes from the initialize result, not the request."""
        if message.get("id") not in self._initializing:
            return
        self._initializing.discard(message.get("id"))
        result = message.get("result")
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
            self._version = result["protocolVersion"]

    def _note_tools(self, message: dict[str, Any]) -> None:
        """A tools/list result: which arguments each tool wants mirrored as `Mcp-Param-*` headers."""
        message_id = message.get("id")
        if message_id not in self._listing:
            return
        self._listing.discard(message_id)
        result = message.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            name, schema = (tool.get("name"), tool.get("inputSchema")) if isinstance(tool, dict) else (None, None)
            if isinstance(name, str) and isinstance(schema, dict):
                found = header_map(schema)
                if found:
                    self._param_headers[name] = found
                else:
                    self._param_headers.pop(name, None)

    @property
    def related_request(self) -> Any:
        """While a line is being handed on: the id of the request whose event stream carried it, if any."""
        return self._session.delivering_for if self._session is not None else None

    def describe_end(self, code: int | None) -> str:
        return self._failure or "closed the connection"

    def _stamp(self, msg: dict[str, Any]) -> dict[str, str] | None:
        """Per-message headers the transport cannot derive from the session: the protocol version,
        and for a 2026-era request its method, name and mirrored arguments."""
        method = msg.get("method")
        params = jsonrpc.as_object(msg.get("params"))
        if method == "initialize":
            self._version = params.get("protocolVersion") or self._version
            if "id" in msg:
                self._initializing.add(msg["id"])
            return None
        meta = jsonrpc.as_object(params.get("_meta"))
        modern = meta.get(PROTOCOL_VERSION_META)
        version = modern or self._version
        if not version:
            return None
        headers = {"MCP-Protocol-Version": version}
        if modern and method and "id" in msg:
            headers["Mcp-Method"] = method
            key = NAME_BEARING_METHODS.get(method)
            if key and isinstance(params.get(key), str):
                headers["Mcp-Name"] = encode_header_value(params[key])
            if method == "tools/list":
                self._listing.add(msg["id"])
            elif method == "tools/call" and params.get("name") in self._param_headers:
                arguments = params.get("arguments")
                headers.update(
                    param_headers(self._param_headers[params["name"]], arguments if isinstance(arguments, dict) else {})
                )
        return headers

    async def wait(self, timeout: float) -> int | None:
        with anyio.move_on_after(timeout):
            await self._closed.wait()
        return 1 if self._failure else 0

    @property
    def failure(self) -> str | None:
        return self._failure

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        self._outbox_send.close()
        with anyio.move_on_after(max(grace, 0.1)):
            await self._closed.wait()
        self._scope.cancel()
        with anyio.move_on_after(2.0):
            await self._closed.wait()
        return 1 if self._failure else 0


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
