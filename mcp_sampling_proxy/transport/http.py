"""The real server at a Streamable HTTP URL, through the SDK's client transport.

The transport speaks in parsed messages, so lines are validated on the way in and dumped on
the way out (unknown envelope keys do not survive this hop; that is the SDK's limit). The
transport does not know the negotiated protocol version, so every message is stamped with
`MCP-Protocol-Version`, and 2026-era requests also with `Mcp-Method`/`Mcp-Name`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import httpx2  # the SDK's HTTP client (this module is imported for --url and login only)

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.names import PROTOCOL_VERSION_META
from mcp_sampling_proxy.sanitize import one_line
from mcp_sampling_proxy.transport.framing import DEFAULT_MAX_LINE

log = get_logger("mcp_sampling_proxy.upstream")


def add_secret(value: str) -> None:
    """OAuth tokens join the values every log line is scrubbed of."""
    from mcp_sampling_proxy import log as logmod

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
        self._auth: Any = None
        self._refusal_logged: str | None = None
        self._outbox_send, self._outbox_recv = anyio.create_memory_object_stream[bytes](1024)
        self._closed = anyio.Event()
        self._version: str | None = None
        self._failure: str | None = None
        self._listing: set[Any] = set()  # ids of tools/list requests on their way
        self._param_headers: dict[str, Any] = {}  # tool name -> its x-mcp-header map (SEP-2243)

    async def attach(self, on_line: Callable[[bytes], None], on_eof: Callable[[], None], *,
                     max_line: int | None = None, on_oversize: Any = None) -> None:
        """`max_line` bounds a message from the server here too: an SSE event (the SDK's limit, 1 MiB
        by default, refused results a direct host gets) and a JSON response body. Past it the waiting
        request gets an error from the transport; `on_oversize` is for pipes."""
        import asyncio

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
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if self._oauth:
            from mcp_sampling_proxy.transport.oauth import HeadlessOAuth

            self._auth = HeadlessOAuth(self.url, on_secret=add_secret)
        try:
            # no compression: the client inflates a body whole, past any count of the bytes that arrive
            headers = {"Accept-Encoding": "identity", **self._headers}
            client = create_mcp_http_client(headers=headers, auth=self._auth)
            client.event_hooks["response"].append(functools.partial(_bound_body, limit=self._max_message))
            with self._scope:
                async with (
                    client,
                    streamable_http_client(self.url, http_client=client, max_sse_event_size=self._max_message) as (
                        read_stream, write_stream),
                    anyio.create_task_group() as tg,
                ):
                    tg.start_soon(self._pump_out, write_stream, tg.cancel_scope)
                    async for item in read_stream:
                        if isinstance(item, Exception):
                            log.warning("upstream HTTP transport error", error=str(item))
                            continue
                        line = self._login_error(item.message) or item.message.model_dump_json(
                            by_alias=True, exclude_unset=True).encode()
                        self._note_version(item.message)
                        if self._listing:
                            self._note_tools(item.message)
                        self._on_line(line)
                    tg.cancel_scope.cancel()
        except Exception as exc:
            # The SDK's transport fails inside task groups: look through the exception groups.
            cause = _first_leaf(exc)
            if isinstance(cause, httpx2.HTTPError | OSError):
                self._failure = f"could not be reached at {self.url} ({_describe(cause)})"
                log.error("upstream HTTP server unreachable", url=self.url, error=_describe(cause))
            else:
                self._failure = f"failed ({_describe(cause)})"
                log.error("upstream HTTP transport failed", url=self.url, error=_describe(cause),
                          exc_info=cause)
        finally:
            self._closed.set()
            self._on_eof()

    def _login_error(self, message: Any) -> bytes | None:
        """The transport's bare "-32603 Server returned an error response" for a request the server
        refused for lack of an OAuth login becomes an error that says how to log in."""
        auth = self._auth
        if auth is None or not auth.refused_ids or getattr(message, "error", None) is None:
            return None
        if message.id not in auth.refused_ids:
            return None
        from mcp_sampling_proxy.transport.oauth_store import login_command

        auth.refused_ids.discard(message.id)
        why = auth.refusal or f"{self.url} needs an OAuth login"
        if why != self._refusal_logged:
            self._refusal_logged = why
            log.error("upstream needs an OAuth login; requests get an error until then", url=self.url, why=why)
        return jsonrpc.error_response(message.id, jsonrpc.INTERNAL_ERROR, why,
                                      data={"login": login_command(self.url)})

    def _note_version(self, message: Any) -> None:
        """The negotiated version comes from the initialize result, not the request (read from the
        parsed message: a large result that quotes both names is not parsed a second time)."""
        result = getattr(message, "result", None)
        if isinstance(result, dict) and "serverInfo" in result and isinstance(result.get("protocolVersion"), str):
            self._version = result["protocolVersion"]

    def _note_tools(self, message: Any) -> None:
        """A tools/list result: which arguments each tool wants mirrored as `Mcp-Param-*` headers."""
        from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

        message_id = getattr(message, "id", None)
        if message_id not in self._listing:
            return
        self._listing.discard(message_id)
        result = getattr(message, "result", None)
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            name, schema = (tool.get("name"), tool.get("inputSchema")) if isinstance(tool, dict) else (None, None)
            if isinstance(name, str) and isinstance(schema, dict) and find_invalid_x_mcp_header(schema) is None:
                header_map = x_mcp_header_map(schema)
                if header_map:
                    self._param_headers[name] = header_map
                else:
                    self._param_headers.pop(name, None)

    def describe_end(self, code: int | None) -> str:
        return self._failure or "closed the connection"

    async def _pump_out(self, write_stream: Any, session_scope: anyio.CancelScope) -> None:
        from mcp.shared.message import ClientMessageMetadata, SessionMessage
        from mcp_types import jsonrpc_message_adapter

        async for line in self._outbox_recv:
            try:
                message = jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError as exc:
                log.warning("message for the HTTP upstream is not valid JSON-RPC; dropped", error=str(exc))
                continue
            headers = self._stamp(json.loads(line))
            await write_stream.send(SessionMessage(message, metadata=ClientMessageMetadata(headers=headers)))
        # stop() closed the outbox: everything queued is sent, so end the session now (the
        # transport then terminates it with a DELETE) instead of waiting out the grace period.
        session_scope.cancel()

    def _stamp(self, msg: Any) -> dict[str, str] | None:
        """Per-message headers the Streamable HTTP transport needs but cannot derive."""
        from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, NAME_BEARING_METHODS, encode_header_value

        if not isinstance(msg, dict):
            return None
        method = msg.get("method")
        params = jsonrpc.as_object(msg.get("params"))
        if method == "initialize":
            self._version = params.get("protocolVersion") or self._version
            return None
        meta = jsonrpc.as_object(params.get("_meta"))
        modern = meta.get(PROTOCOL_VERSION_META)
        version = modern or self._version
        if not version:
            return None
        headers = {"MCP-Protocol-Version": version}
        if modern and method and "id" in msg:
            headers[MCP_METHOD_HEADER] = method
            key = NAME_BEARING_METHODS.get(method)
            if key and isinstance(params.get(key), str):
                headers[MCP_NAME_HEADER] = encode_header_value(params[key])
            if method == "tools/list":
                self._listing.add(msg["id"])
            elif method == "tools/call" and params.get("name") in self._param_headers:
                from mcp.shared.inbound import mcp_param_headers

                arguments = params.get("arguments")
                headers.update(mcp_param_headers(self._param_headers[params["name"]],
                                                 arguments if isinstance(arguments, dict) else {}))
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


async def _bound_body(response: Any, *, limit: int) -> None:
    """A response hook. A compressed body is refused before a byte of it is inflated (the client
    inflates a chunk whole: 200 KB of gzip are 200 MB), whatever its type; the proxy asks for none.
    A JSON body is read whole by the SDK, so it is cut off past `limit` bytes; SSE streams have the
    SDK's per-event limit. The SDK answers the waiting request with an error either way."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        response.stream = _CappedBody(response.stream, 0, f"the server answered with content-encoding "
                                      f"{one_line(encoding, 40)!r} although the proxy asks for none (a compressed "
                                      "body can inflate past --max-message-bytes)")
    elif response.headers.get("content-type", "").lower().startswith("application/json"):
        response.stream = _CappedBody(response.stream, limit, f"the server's response is over the proxy's limit "
                                      f"of {limit:,} bytes (--max-message-bytes)")


class _CappedBody(httpx2.AsyncByteStream):
    """A response byte stream that raises (`refusal`) past `limit` bytes instead of growing without end."""

    def __init__(self, inner: Any, limit: int, refusal: str):
        self._inner = inner
        self._limit = limit
        self._refusal = refusal

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise httpx2.StreamError(self._refusal)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
