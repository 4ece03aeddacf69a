"""A minimal MCP host over a child process's stdio, for `try`: initialize, list the tools, call one.

It speaks JSON lines as any host does, as a host without sampling or elicitation: a request the child
sends (roots, a form) is refused with -32601, its notifications (progress, logs) are read and let go.
It loads nothing of the `mcp` SDK, whose import alone cost `try` about a second of every run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from mcp_sampling_proxy import __version__
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.eras import LATEST_HANDSHAKE

MAX_LINE = 64 * 1024 * 1024  # the proxy's own default cap on a message
STOP_GRACE = 5.0  # s the child gets after its stdin closes before it is terminated


class SessionClosed(Exception):
    """The child's stdout ended before an answer came: it (or what it started) ended."""


class StdioHost:
    """Requests to one child over its stdin, answers read from its stdout (`start`)."""

    def __init__(self, process: anyio.abc.Process):
        self._process = process
        self._ids = 0
        self._waiting: dict[int, list[dict[str, Any]]] = {}
        self._answered: dict[int, anyio.Event] = {}

    @classmethod
    @asynccontextmanager
    async def start(cls, command: Sequence[str], env: dict[str, str], errlog: IO[Any]) -> AsyncIterator[StdioHost]:
        """The child started, initialized as a handshake-era host; stopped when the body ends (stdin closed,
        then SIGTERM after STOP_GRACE)."""
        process = await anyio.open_process(list(command), env=env, stderr=errlog)
        host = cls(process)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(host._read)
                await host.request(
                    "initialize",
                    {
                        "protocolVersion": LATEST_HANDSHAKE,
                        "capabilities": {},
                        "clientInfo": {"name": "mcp-sampling-proxy try", "version": __version__},
                    },
                )
                await host.notify("notifications/initialized")
                yield host
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await host._stop()

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the child lists, page after page."""
        tools: list[dict[str, Any]] = []
        cursor: Any = None
        while True:
            page = await self.request("tools/list", {} if cursor is None else {"cursor": cursor})
            tools += [tool for tool in page.get("tools") or [] if isinstance(tool, dict)]
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tools/call", {"name": name, "arguments": arguments})

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of one request; RuntimeError with the child's error, SessionClosed when it ends first."""
        self._ids += 1
        request_id = self._ids
        slot: list[dict[str, Any]] = []
        self._waiting[request_id], self._answered[request_id] = slot, anyio.Event()
        try:
            await self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await self._answered[request_id].wait()
        finally:
            del self._waiting[request_id], self._answered[request_id]
        if not slot:
            raise SessionClosed("Connection closed")
        answer = slot[0]
        if "error" in answer:
            error = jsonrpc.as_object(answer["error"])
            raise RuntimeError(f"{method}: {error.get('message', 'error')} (code {error.get('code')})")
        return jsonrpc.as_object(answer.get("result"))

    async def notify(self, method: str) -> None:
        await self._write({"jsonrpc": "2.0", "method": method})

    async def _write(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        try:
            await self._process.stdin.send(jsonrpc.dumps(message) + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise SessionClosed("Connection closed") from exc

    async def _read(self) -> None:
        assert self._process.stdout is not None
        lines = BufferedByteReceiveStream(self._process.stdout)
        try:
            while True:
                line = await lines.receive_until(b"\n", MAX_LINE)
                try:
                    message = jsonrpc.parse(line)
                except ValueError:
                    continue  # not JSON: nothing a host could do with it
                if isinstance(message, dict):
                    await self._take(message)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound, anyio.ClosedResourceError):
            pass
        finally:
            for event in self._answered.values():  # nothing more will come: every request learns so
                event.set()

    async def _take(self, message: dict[str, Any]) -> None:
        if "method" not in message:
            request_id = message.get("id")
            if isinstance(request_id, int) and request_id in self._waiting and not self._waiting[request_id]:
                self._waiting[request_id].append(message)
                self._answered[request_id].set()
        elif jsonrpc.usable_id(message.get("id")):  # a request to this host, which offers nothing
            error = {
                "code": jsonrpc.METHOD_NOT_FOUND,
                "message": f"mcp-sampling-proxy try has no {message['method']!r}",
            }
            with contextlib.suppress(SessionClosed):
                await self._write({"jsonrpc": "2.0", "id": message["id"], "error": error})

    async def _stop(self) -> None:
        stdin = self._process.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):
                await stdin.aclose()  # EOF: the proxy stops its server and exits
        with anyio.move_on_after(STOP_GRACE):
            await self._process.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.terminate()
        with anyio.move_on_after(STOP_GRACE):
            await self._process.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()
        await self._process.wait()
