"""The multiplexer of a shared upstream (relay/multiplex.py): what the one server sees of several sessions,
and what each session gets back.

Each session is a `Branch` as its relay uses it (attach, send); the server's side is a line pipe that
records what the server was sent and lets the test write what the server says, so every id and token
can be read on both sides.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_sampling_proxy.relay.multiplex import AMBIGUOUS, Branch, Multiplexer

pytestmark = pytest.mark.anyio


class ServerPipe:
    """The upstream's surface (runtime.py's Upstream) over two lists: what was sent, and what to say."""

    label = "shared"

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.exit_code: int | None = None

    async def attach(self, on_line: Any, on_eof: Any, *, max_line: int = 0, on_oversize: Any = None) -> None:
        self.on_line, self.on_eof = on_line, on_eof

    def send(self, line: bytes) -> None:
        self.sent.append(json.loads(line))

    def say(self, message: dict[str, Any]) -> None:
        self.on_line(json.dumps({"jsonrpc": "2.0", **message}).encode())

    async def wait(self, timeout: float) -> int | None:
        return self.exit_code

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        return self.exit_code

    def describe_end(self, code: int | None) -> str:
        return f"exited with code {code}"


class Session:
    """One session's relay, as far as the branch can tell: what it sends, what it receives."""

    def __init__(self, branch: Branch):
        self.branch = branch
        self.got: list[dict[str, Any]] = []
        self.ended = False

    async def open(self) -> Session:
        await self.branch.attach(lambda line: self.got.append(json.loads(line)), self._end)
        return self

    def _end(self) -> None:
        self.ended = True

    def send(self, **message: Any) -> None:
        self.branch.send(json.dumps({"jsonrpc": "2.0", **message}).encode())


async def sessions(count: int) -> tuple[ServerPipe, Multiplexer, list[Session]]:
    server = ServerPipe()
    mux = Multiplexer(server)
    await mux.start(max_line=1 << 20)
    return server, mux, [await Session(mux.branch()).open() for _ in range(count)]


async def test_requests_with_the_same_id_are_kept_apart_and_answered_with_their_own_id_and_type() -> None:
    server, _, (a, b) = await sessions(2)
    a.send(id=1, method="tools/call", params={"name": "echo"})
    b.send(id=1, method="tools/call", params={"name": "echo"})
    b.send(id="1", method="tools/list")
    private = [message["id"] for message in server.sent]
    assert len(set(private)) == 3 and all(isinstance(i, str) and i.startswith("mux-") for i in private)
    for request_id, answer in zip(reversed(private), ("b-list", "b-call", "a-call"), strict=True):
        server.say({"id": request_id, "result": {"text": answer}})
    assert a.got == [{"jsonrpc": "2.0", "id": 1, "result": {"text": "a-call"}}]
    assert b.got == [
        {"jsonrpc": "2.0", "id": "1", "result": {"text": "b-list"}},  # a string id stays a string
        {"jsonrpc": "2.0", "id": 1, "result": {"text": "b-call"}},  # an integer stays an integer
    ]
    server.say({"id": private[0], "result": {}})  # answered twice: nobody waits any more
    assert len(a.got) == 1


async def test_the_server_is_initialized_once_and_later_sessions_get_its_result() -> None:
    server, mux, (a, b) = await sessions(2)
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}
    a.send(id=0, method="initialize", params=hello)
    b.send(id="init", method="initialize", params=hello)  # before the server answered a's
    assert [m["method"] for m in server.sent] == ["initialize"]
    result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}}
    server.say({"id": server.sent[0]["id"], "result": result})
    a.send(method="notifications/initialized")
    b.send(method="notifications/initialized")
    later = await Session(mux.branch()).open()
    later.send(id=5, method="initialize", params=hello)
    assert a.got == [{"jsonrpc": "2.0", "id": 0, "result": result}]
    assert b.got == [{"jsonrpc": "2.0", "id": "init", "result": result}]
    assert later.got == [{"jsonrpc": "2.0", "id": 5, "result": result}]
    assert [m["method"] for m in server.sent] == ["initialize", "notifications/initialized"]


async def test_progress_and_cancellation_name_the_private_ids_and_come_back_as_the_session_said() -> None:
    server, _, (a, b) = await sessions(2)
    a.send(id=3, method="tools/call", params={"name": "slow", "_meta": {"progressToken": 3}})
    b.send(id=3, method="tools/call", params={"name": "slow", "_meta": {"progressToken": 3}})
    (to_a, to_b) = server.sent
    assert to_a["params"]["_meta"]["progressToken"] != to_b["params"]["_meta"]["progressToken"]
    token = to_b["params"]["_meta"]["progressToken"]
    server.say({"method": "notifications/progress", "params": {"progressToken": token, "progress": 1}})
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 3, "progress": 1}}
    assert b.got == [progress]  # the token b chose, an integer again
    assert a.got == []
    a.send(method="notifications/cancelled", params={"requestId": 3, "reason": "enough"})
    assert server.sent[-1]["params"] == {"requestId": to_a["id"], "reason": "enough"}
    a.send(method="notifications/cancelled", params={"requestId": 99})  # not at the server: not sent
    assert len(server.sent) == 3


async def test_a_servers_request_goes_to_the_session_with_a_call_in_flight_and_is_refused_when_unclear() -> None:
    server, _, (a, b) = await sessions(2)
    a.send(id=1, method="tools/call", params={"name": "sample"})
    sampling = {"id": 0, "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
    server.say(sampling)
    assert a.got == [{"jsonrpc": "2.0", **sampling}] and b.got == []
    b.send(id=0, result={"model": "stolen"})  # b was not asked: its answer does not reach the server
    a.send(id=0, result={"model": "m"})
    assert server.sent[-1] == {"jsonrpc": "2.0", "id": 0, "result": {"model": "m"}}
    b.send(id=1, method="tools/call", params={"name": "sample"})
    server.say({**sampling, "id": 1})  # both have a call in flight: whose is it?
    assert server.sent[-1]["id"] == 1 and server.sent[-1]["error"]["message"] == AMBIGUOUS
    server.say({"id": 2, "method": "ping"})
    assert server.sent[-1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert len(a.got) == 1 and b.got == []


async def test_other_notifications_reach_every_session_and_the_servers_end_too() -> None:
    server, mux, (a, b) = await sessions(2)
    server.say({"method": "notifications/tools/list_changed"})
    assert a.got == b.got == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    server.exit_code = 3
    server.on_eof()
    assert a.ended and b.ended and mux.ended.is_set()
    assert a.branch.describe_end(await a.branch.wait(1.0)) == "exited with code 3"


async def test_a_session_that_leaves_has_its_requests_cancelled_and_the_server_keeps_running() -> None:
    server, mux, (a, b) = await sessions(2)
    a.send(id=7, method="tools/call", params={"name": "slow"})
    private = server.sent[-1]["id"]
    assert await a.branch.stop(2.0) is None
    assert server.sent[-1] == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": private, "reason": "the caller's session ended"},
    }
    assert a.branch.describe_end(None) == "is shared and keeps running"
    server.say({"id": private, "result": {}})  # late: nobody gets it
    assert a.got == [] and mux.sessions == 1
    b.send(id=1, method="tools/list")
    assert server.sent[-1]["method"] == "tools/list"
