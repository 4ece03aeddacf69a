"""The proxy's real relay and services in memory, between a host and a server the test plays.

As mitmproxy's Playbook drives its layers: no process and no pipe, the real `Relay` wired to the real
services by `runtime.build_services` from a policy text (sampling to an LLM on 127.0.0.1, elicitation,
approval, audit, tool rules), exactly as the proxy wires them. The test speaks for each peer with
`says` and reads what the relay sent it with `next`; a third peer can stand for the server's second,
2026-era connection (`Playbook.second_leg`).

    async with Playbook(tmp_path, policy) as play:
        play.host.says({"jsonrpc": "2.0", "id": 1, "method": "initialize", ...})
        assert (await play.server.next())["method"] == "initialize"

The common cases have their shortcuts: `handshake(capabilities)` (a host with or without sampling and
elicitation), `sample(params)` and `elicit(params)` (a server's request inside a host's tool call; `host=`
answers the request when the relay asks the host), `call(tool)` for several requests in one call,
`server_asks` for one outside any call, `host_asks` for a host's request to a server `serve_with` plays,
`audit()`. With `console=True` the companion console's
socket is served in the test's runtime dir and `attach_console()` connects a test console to it, as the
user's `console` would; approvals, forms and reviews then go to it. Limits and budgets keep their state
where the proxy's do (the test's own state dir), so a second Playbook is the proxy started again; with
`state=True` so do `always` approvals and the tool pins (`target`: the server's command line, which with
`name` says whose pins they are).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from helpers.console import SocketConsole
from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.protocol import capabilities
from mcp_sampling_proxy.quotas.state import approvals_file, state_dir
from mcp_sampling_proxy.quotas.tool_pins import PINS_FILE, ToolPins
from mcp_sampling_proxy.relay.core import Relay
from mcp_sampling_proxy.relay.session import Session
from mcp_sampling_proxy.runtime import build_services
from mcp_sampling_proxy.services.sampling.adapters import AdapterPool

HANDSHAKE_VERSION = "2025-11-25"
HostAnswer = Callable[[dict[str, Any]], dict[str, Any]]
"""The host's answer to a request the relay sent it: `{"result": ...}` or `{"error": ...}`."""


class Peer:
    """One side the test plays: what the relay sent it, in order, and a way to speak to the relay."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._send: MemoryObjectSendStream[bytes]
        self._inbox: MemoryObjectReceiveStream[bytes]
        self._send, self._inbox = anyio.create_memory_object_stream[bytes](1000)
        self.to_relay: Callable[[bytes], None] | None = None

    def receive(self, line: bytes) -> None:
        """The relay's send function for this side."""
        self._send.send_nowait(line)

    def says(self, message: dict[str, Any]) -> None:
        assert self.to_relay is not None, f"the {self.name} is not connected"
        self.to_relay(json.dumps(message).encode())

    def says_raw(self, line: bytes) -> None:
        """A line as it is, JSON or not."""
        assert self.to_relay is not None, f"the {self.name} is not connected"
        self.to_relay(line)

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next message the relay sent this side (fails after `timeout` seconds without one)."""
        with anyio.fail_after(timeout):
            message: dict[str, Any] = json.loads(await self._inbox.receive())
            return message

    def nothing_yet(self) -> bool:
        """True when the relay has sent this side nothing that was not read."""
        return self._inbox.statistics().current_buffer_used == 0

    def close(self) -> None:
        """The play is over: its streams are closed (left open, they are warned about when collected, in
        whichever later test that happens)."""
        self._send.close()
        self._inbox.close()


class SecondLegPeer(Peer):
    """The server's second connection (relay/core.py `SecondLeg`), as the test plays it: `opened`
    counts its openings; `refuse` makes it one that cannot be opened."""

    def __init__(self) -> None:
        super().__init__("second leg")
        self.opened = 0
        self.refuse = False
        self.end: Callable[[], None] | None = None

    async def open(
        self, on_line: Callable[[bytes], None], on_end: Callable[[], None]
    ) -> Callable[[bytes], None] | None:
        self.opened += 1
        if self.refuse:
            return None
        self.to_relay, self.end = on_line, on_end
        return self.receive


class Call:
    """A host's tool call in flight at the server (`Playbook.call`): the server's requests inside it."""

    def __init__(self, play: Playbook) -> None:
        self._play = play

    async def sample(
        self, params: dict[str, Any], timeout: float = 30.0, host: HostAnswer | None = None
    ) -> dict[str, Any]:
        return await self._play.server_asks("sampling/createMessage", params, timeout, host)

    async def elicit(
        self, params: dict[str, Any], timeout: float = 30.0, host: HostAnswer | None = None
    ) -> dict[str, Any]:
        return await self._play.server_asks("elicitation/create", params, timeout, host)


class Playbook:
    """The relay and the services of one session, between `host` and `server` (and `second_leg`)."""

    def __init__(
        self,
        tmp_path: Path,
        policy: str = "",
        *,
        second_leg: bool = False,
        name: str = "played",
        console: bool = False,
        state: bool = False,
        target: str = "played-server",
    ) -> None:
        """`name`: the server's name, as `--name` gives it; `console`: serve the companion console's socket;
        `state`: keep `always` approvals and tool pins (when `tools.pin`) in the state dir, as the proxy does."""
        self.audit_path = tmp_path / "audit.jsonl"
        audit = f"audit:\n  path: {self.audit_path}\n  fsync: false\n"
        self.settings = parse_settings(policy + ("" if "\naudit:" in f"\n{policy}" else audit), "playbook.yaml")
        self.host = Peer("host")
        self.server = Peer("server")
        self.second_leg = SecondLegPeer() if second_leg else None
        self._tg: anyio.abc.TaskGroup | None = None
        self._audit: AuditLog | None = None  # the proxy's audit log, once entered
        self._calls = 0  # the host's calls `call` made
        self._requests = 0  # the server's requests `server_asks` made
        self._name = name
        self._serve_console = console
        self._state = state
        self._target = target
        self.host_asked: list[dict[str, Any]] = []  # the requests `host=` answered, as the host got them
        self.relay: Relay
        self.console: ConsoleServer

    async def __aenter__(self) -> Playbook:
        settings = self.settings
        audit = self._audit = AuditLog.from_settings(settings)
        self._adapters = AdapterPool(list(settings.providers), None)
        tools = settings.sampling.advertise_tools and self._adapters.can_use_tools
        offered = capabilities.offers(
            capabilities.offered_sampling(route=settings.sampling.route, tools=tools),
            capabilities.offered_elicitation(route=settings.elicitation.route, url_mode=settings.elicitation.url_mode),
        )
        session = Session(name_override=self._name)
        console = self.console = ConsoleServer(lambda: session.server_name, lambda: session.host_name)
        approvals, pins = None, None
        if self._state:  # the stores the proxy opens (runtime.py), in the test's own state dir
            approvals = approvals_file(state_dir() / "approvals.json")
            pins = ToolPins(state_dir() / PINS_FILE) if settings.tools.pin else None
        services = build_services(
            settings, self._adapters, audit, None, console, offered, approvals, pins, self._target
        )
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        if self._serve_console:
            await self._tg.start(console.serve)
        keepalive = settings.sampling.keepalive_seconds
        self.relay = Relay(
            self.host.receive,
            self.server.receive,
            services.ports,
            self._tg,
            session,
            keepalive_seconds=keepalive,
            era=settings.era,
        )
        self.host.to_relay, self.server.to_relay = self.relay.from_host, self.relay.from_upstream
        if self.second_leg is not None:
            self.relay.second_leg = self.second_leg
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._tg is not None and self._audit is not None
        self.relay.cancel_all()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(kind, error, trace)
        await self._adapters.aclose()
        self._audit.close()
        for peer in (self.host, self.server, self.second_leg):
            if peer is not None:
                peer.close()

    def serve_with(self, answers: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Play the server by a script: each message the relay sends it gets `answers(message)` back at
        once. Returns the list the messages land in, as the server got them."""
        got: list[dict[str, Any]] = []

        async def serve() -> None:
            while True:
                message = await self.server.next(timeout=3600)
                got.append(message)
                for each in answers(message):
                    self.server.says(each)

        assert self._tg is not None
        self._tg.start_soon(serve)
        return got

    async def host_asks(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The host's request of `method` and the response it gets (the server played by `serve_with`)."""
        self._calls += 1
        asked = f"host-{self._calls}"
        self.host.says({"jsonrpc": "2.0", "id": asked, "method": method, "params": params})
        while True:
            answer = await self.host.next()
            if answer.get("id") == asked and "method" not in answer:
                return answer

    def audit(self) -> list[dict[str, Any]]:
        """The audit records written so far (those a writer thread still holds included)."""
        if self._audit is not None:  # a record may still be with a writer thread (AuditLog.settle)
            self._audit.settle()
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines()]

    async def attach_console(self) -> SocketConsole:
        """A test console attached to this proxy's socket (`console=True`), past its hello."""
        assert self._serve_console and self.console.path is not None, "Playbook(..., console=True) serves one"
        return await SocketConsole.attach(self.console.path.parent)

    async def sample(
        self, params: dict[str, Any], tool: str = "sample", timeout: float = 30.0, host: HostAnswer | None = None
    ) -> dict[str, Any]:
        """What a server asking for a sample inside the host's call of `tool` gets back from the relay (after
        `handshake`): the JSON-RPC response, its `result` or its `error`. The server then ends the call.
        `host`: the relay is expected to ask the host, which answers so (`host_asked` keeps the request)."""
        async with self.call(tool) as call:
            return await call.sample(params, timeout, host)

    async def elicit(
        self, params: dict[str, Any], tool: str = "elicit", timeout: float = 30.0, host: HostAnswer | None = None
    ) -> dict[str, Any]:
        """As `sample`, for an `elicitation/create` request."""
        async with self.call(tool) as call:
            return await call.elicit(params, timeout, host)

    @asynccontextmanager
    async def call(self, tool: str) -> AsyncIterator[Call]:
        """The host's call of `tool`, in flight at the server while the block runs (its requests belong to
        it); the server ends it after the block."""
        self._calls += 1
        call = f"call-{self._calls}"
        self.host.says(
            {"jsonrpc": "2.0", "id": call, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
        )
        forwarded = await self.server.next()
        assert forwarded["method"] == "tools/call", forwarded
        yield Call(self)
        self.server.says({"jsonrpc": "2.0", "id": forwarded["id"], "result": {"content": []}})
        ended = await self.host.next()
        assert ended.get("id") == call, ended

    async def server_asks(
        self, method: str, params: dict[str, Any], timeout: float = 30.0, host: HostAnswer | None = None
    ) -> dict[str, Any]:
        """The server's request of `method` (inside a call when `call` runs, else unsolicited): the
        response it gets. `host`: as for `sample`."""
        self._requests += 1
        asked = f"request-{self._requests}"
        self.server.says({"jsonrpc": "2.0", "id": asked, "method": method, "params": params})
        if host is not None:
            request = await self.host.next(timeout)
            assert request.get("method") == method, request
            self.host_asked.append(request)
            self.host.says({"jsonrpc": "2.0", "id": request["id"], **host(request)})
        answer = await self.server.next(timeout)
        assert answer.get("id") == asked and "method" not in answer, answer
        return answer

    async def handshake(self, capabilities: dict[str, Any] | None = None) -> None:
        """The host's initialize, answered by the server in the handshake era, and `initialized`."""
        caps = capabilities if capabilities is not None else {"elicitation": {}}
        self.host.says(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": HANDSHAKE_VERSION,
                    "capabilities": caps,
                    "clientInfo": {"name": "played-host", "version": "1"},
                },
            }
        )
        initialize = await self.server.next()
        assert initialize["method"] == "initialize", initialize
        self.server.says(
            {
                "jsonrpc": "2.0",
                "id": initialize["id"],
                "result": {
                    "protocolVersion": HANDSHAKE_VERSION,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "played-server", "version": "1"},
                },
            }
        )
        assert (await self.host.next())["result"]["protocolVersion"] == HANDSHAKE_VERSION
        self.host.says({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await self.server.next())["method"] == "notifications/initialized"
