"""A server played in memory, as the proxy's `Upstream` (runtime.py): what `serve`'s sessions talk to in tests
that start no process (helpers/played_serve.py `played_sessions`).

By default it is the `mcp` SDK's real server (`MCPServer`, both protocol eras) over memory streams, with the
kitchen-sink server's tools that `serve`'s tests use, answering as that fixture does: `echo`, `sample`
(sampling/createMessage inside the call, its result as JSON text), `progress`, `log`, `notify_changes`,
`crash`, which ends the played server with the exit status given, its call unanswered, as the fixture's
process ends, `slow` and `slow_stats` (its counts of started, finished and cancelled `slow` calls), and
the tools that pause, `gated_progress` and `log_later`, which wait for a gate the test
opens (`Gates`: where the fixture waits for a file to exist). Or a script (`answers(message) -> messages`,
as tests/fixtures/modern_raw_server.py gives) plays a server the SDK cannot be made to be.

Lines cross as they would cross a pipe: JSON-RPC bytes, parsed by the SDK's wire types on the server's side
(as its stdio transport does) and dumped back the same way.
"""

from __future__ import annotations

import json
import math
import signal
import warnings
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import SessionMessage

from mcp_sampling_proxy.transport.stdio import describe_exit

Script = Callable[[dict[str, Any]], list[dict[str, Any]]]
"""A scripted server: the messages it sends at once for each message it gets."""


class Gates(defaultdict[str, anyio.Event]):
    """Named gates the pausing tools wait at, shared by every played server of a test: `gates[name].set()`
    opens one."""

    def __init__(self) -> None:
        super().__init__(anyio.Event)


class PlayedServer:
    """One server in memory, started by `serve`'s front for a session (or lane, or second leg). `ended` is
    set when it has ended, `code` is its exit status then; `end(code)` ends it as a process exiting would."""

    reader = None  # no pipe to pause
    writer = None

    def __init__(
        self, tg: anyio.abc.TaskGroup, label: str, script: Script | None = None, gates: Gates | None = None
    ) -> None:
        self.label = label
        self._tg = tg
        self.gates = gates if gates is not None else Gates()
        self._script = script
        self._to_server: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._scope = anyio.CancelScope()
        self.ended = anyio.Event()
        self.code: int | None = None
        self.got: list[dict[str, Any]] = []  # every message the proxy sent it, in order
        self.slow_stats = {"started": 0, "finished": 0, "cancelled": 0}  # its `slow` calls, as the fixture counts
        self._later: set[anyio.CancelScope] = set()

    @property
    def running(self) -> bool:
        return not self.ended.is_set()

    async def attach(
        self,
        on_line: Callable[[bytes], None],
        on_eof: Callable[[], None],
        *,
        max_line: int = 0,
        on_oversize: Callable[[int, bytes, bytes], None] | None = None,
    ) -> None:
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
        self._to_server = send
        self._tg.start_soon(self._run, receive, on_line, on_eof)

    def send(self, line: bytes) -> None:
        """The proxy's line to the server."""
        if self._to_server is None or self.ended.is_set():
            return
        self.got.append(json.loads(line))
        try:
            item: SessionMessage | Exception = SessionMessage(
                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            )
        except ValueError as exc:
            item = exc
        self._to_server.send_nowait(item)

    def end(self, code: int) -> None:
        """The server exits with `code`: what it was doing is never answered."""
        if self.code is None:
            self.code = code
        self._scope.cancel()

    async def wait(self, timeout: float) -> int | None:
        with anyio.move_on_after(timeout):
            await self.ended.wait()
        return self.code if self.ended.is_set() else None

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        """EOF on its input (the server ends when it has read everything), then a SIGTERM's end."""
        if self._to_server is not None:
            self._to_server.close()
        if await self.wait(grace) is None:
            self.end(-signal.SIGTERM)
            await self.ended.wait()
        return self.code

    def describe_end(self, code: int | None) -> str:
        return describe_exit(code)

    def later(self, work: Callable[[], Any]) -> None:
        """Work of the server's that outlives the call that started it (not the server)."""

        async def run() -> None:
            with anyio.CancelScope() as scope:
                self._later.add(scope)
                await work()

        self._tg.start_soon(run)

    async def _run(self, receive: Any, on_line: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        try:
            with self._scope:
                if self._script is not None:
                    async for item in receive:
                        if isinstance(item, SessionMessage):
                            message = item.message.model_dump(by_alias=True, exclude_unset=True)
                            for each in self._script(message):
                                on_line(json.dumps(each).encode())
                else:
                    await self._serve(receive, on_line)
                self.code = 0 if self.code is None else self.code
        finally:
            for scope in self._later:
                scope.cancel()
            self.ended.set()
            on_eof()

    async def _serve(self, receive: Any, on_line: Callable[[bytes], None]) -> None:
        lowlevel = kitchen_sink(self)._lowlevel_server
        out, lines = anyio.create_memory_object_stream[SessionMessage](math.inf)

        async def run() -> None:
            async with out:
                await lowlevel.run(receive, out, lowlevel.create_initialization_options())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            async for message in lines:
                on_line(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode())


def kitchen_sink(played: PlayedServer) -> MCPServer:
    """The kitchen-sink fixture's tools that serve's tests call, on the SDK's real server."""
    mcp = MCPServer("kitchen-sink", instructions="Test fixture for mcp-sampling-proxy relay tests.")

    @mcp.tool(structured_output=False)
    def echo(text: str) -> str:
        """Return ``text`` unchanged."""
        return text

    @mcp.tool(structured_output=False)
    async def progress(steps: int, ctx: Context) -> str:
        """Emit ``steps`` progress notifications, then finish."""
        for i in range(1, steps + 1):
            await ctx.report_progress(i, steps, f"step {i}/{steps}")
        return f"done {steps} steps"

    @mcp.tool(structured_output=False)
    async def log(message: str, ctx: Context) -> str:
        """Send one ``notifications/message`` with ``message`` as data."""
        with warnings.catch_warnings():  # deprecated in 2026-07-28, and what serve must still pass on
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await ctx.log("info", message, logger_name="kitchen-sink")
        return "logged info"

    @mcp.tool(structured_output=False)
    async def notify_changes(ctx: Context) -> str:
        """Send tools/resources/prompts list_changed and a resources/updated."""
        await ctx.session.send_tool_list_changed()
        await ctx.session.send_resource_list_changed()
        await ctx.session.send_prompt_list_changed()
        await ctx.session.send_resource_updated("test://hello")
        return "notified"

    @mcp.tool(structured_output=False)
    async def sample(prompt: str, ctx: Context, max_tokens: int = 100) -> types.CallToolResult:
        """Call ``sampling/createMessage``: JSON ``{"content", "model", "stopReason"}``, or ``{"error"}``."""
        try:
            with warnings.catch_warnings():  # deprecated in 2026-07-28, and what serve must still answer
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                result = await ctx.session.create_message(
                    [types.SamplingMessage(role="user", content=types.TextContent(text=prompt))],
                    max_tokens=max_tokens,
                    related_request_id=ctx.request_id,
                )
        except MCPError as exc:
            error = {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(error))], is_error=True)
        answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))])

    @mcp.tool(structured_output=False)
    async def gated_progress(steps: int, gate: str, ctx: Context) -> str:
        """Report progress 1, wait until ``gate`` opens, report 2..``steps``, finish."""
        await ctx.report_progress(1, steps, f"step 1/{steps}")
        await played.gates[gate].wait()
        for i in range(2, steps + 1):
            await ctx.report_progress(i, steps, f"step {i}/{steps}")
        return f"done {steps} steps"

    @mcp.tool(structured_output=False)
    async def log_later(count: int, first: str, rest: str, ctx: Context, done: str = "") -> str:
        """Return at once; log "later 1" once ``first`` opens, "later 2".."later ``count``" once ``rest`` opens,
        then open ``done`` (if named). Sent while no call is in flight, they go to the client's GET stream."""
        session = ctx.session

        async def later() -> None:
            with warnings.catch_warnings():  # deprecated in 2026-07-28, and what serve must still pass on
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await played.gates[first].wait()
                await session.send_log_message("info", "later 1", logger="kitchen-sink")
                await played.gates[rest].wait()
                for i in range(2, count + 1):
                    await session.send_log_message("info", f"later {i}", logger="kitchen-sink")
            if done:
                played.gates[done].set()

        played.later(later)
        return "logging later"

    @mcp.tool(structured_output=False)
    async def slow(seconds: float) -> str:
        """Sleep ``seconds``; a cancellation interrupts it and is counted (see `slow_stats`)."""
        played.slow_stats["started"] += 1
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            played.slow_stats["cancelled"] += 1
            raise
        played.slow_stats["finished"] += 1
        return f"slept {seconds}"

    @mcp.tool(structured_output=False)
    def slow_stats() -> str:
        """JSON counters for `slow` calls: started / finished / cancelled."""
        return json.dumps(played.slow_stats)

    @mcp.tool(structured_output=False)
    async def crash(code: int = 1) -> str:
        """End the whole server with exit status ``code`` while this request is still in flight."""
        played.end(code)
        await anyio.sleep_forever()
        return "never"

    return mcp
