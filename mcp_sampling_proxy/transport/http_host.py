"""The host's side as one Streamable HTTP session, for the relay that talks to hosts in lines.

The relay sends and receives JSON-RPC lines (bytes). Here those lines meet the `mcp` SDK's
`StreamableHTTPServerTransport`, which does the HTTP part (POST with a JSON or SSE answer, the GET
stream, DELETE, `Mcp-Session-Id`) and hands over `SessionMessage`s. A message for the host that is
not a response must say which host request it belongs to, or it goes to the GET stream: a progress
notification goes with the request whose `progressToken` it carries, a server request or other
notification with the host request the relay says owns it (`owner`), else the GET stream.

The SDK's models drop unknown envelope keys and read a non-integer numeric id as a notification
(DESIGN notes); over HTTP that is the SDK's reading of the wire, as it is for any SDK server.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse, jsonrpc_message_adapter

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc

log = get_logger("mcp_sampling_proxy.transport.http_host")

Owner = Callable[[dict[str, Any]], Any]  # a message for the host -> the host request id it belongs to (or None)


class HttpHost:
    """Lines to and from one HTTP client session (the relay's `to_host` and `from_host`)."""

    def __init__(self, owner: Owner):
        self._owner = owner
        self._out: MemoryObjectSendStream[SessionMessage]
        self._queued: MemoryObjectReceiveStream[SessionMessage]
        self._out, self._queued = anyio.create_memory_object_stream[SessionMessage](math.inf)
        self.drained = anyio.Event()  # set once `close` was called and every queued message went out

    def send(self, line: bytes) -> None:
        """The relay's `to_host`: synchronous, so messages are queued and written in order by `write_out`.
        The stream a message belongs to is found now, not when it is written: by then the relay may have
        answered its request (a server's last progress comes just before its result)."""
        try:
            message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as exc:
            log.error("a message for an HTTP client is not valid JSON-RPC; dropped", error=str(exc))
            return
        related = None
        if not isinstance(message, JSONRPCResponse | JSONRPCError):
            related = self._owner(jsonrpc.as_object(jsonrpc.parse(line)))
        metadata = ServerMessageMetadata(related_request_id=related) if related is not None else None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the session ended
            self._out.send_nowait(SessionMessage(message, metadata=metadata))

    async def read_in(self, read_stream: Any, on_line: Callable[[bytes], None]) -> None:
        """Hand every message the client posts to `on_line` as a line, until the session ends."""
        with contextlib.suppress(anyio.ClosedResourceError):  # the session was terminated (DELETE, shutdown)
            async for item in read_stream:
                if isinstance(item, Exception):
                    log.warning("an HTTP client's message could not be read", error=str(item))
                    continue
                on_line(item.message.model_dump_json(by_alias=True, exclude_unset=True).encode())

    async def write_out(self, write_stream: Any) -> None:
        """Send the relay's messages to the client, each on the stream it belongs to."""
        try:
            async with self._queued:
                async for message in self._queued:
                    try:
                        await write_stream.send(message)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return
        finally:
            self.drained.set()

    def close(self) -> None:
        self._out.close()
