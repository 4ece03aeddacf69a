"""One handshake-era session's HTTP (front/http_session.py), driven as an ASGI server drives it.

The relay is played by two lists: the lines the session hands it (`taken`) and the lines it sends back
(`session.send`). What is checked is what a client of the Streamable HTTP transport sees: statuses,
the SSE events on each stream, the one GET stream, DELETE, resuming a dropped stream.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.abc
import pytest
from starlette.types import Message, Scope

from mcp_sampling_proxy.front import http_session
from mcp_sampling_proxy.front.event_store import SessionEventStore
from mcp_sampling_proxy.front.http_session import SESSION_BUFFER, HttpSession

pytestmark = pytest.mark.anyio

ACCEPT = (b"accept", b"application/json, text/event-stream")
JSON = (b"content-type", b"application/json")


class Call:
    """One HTTP request as a client makes it: its body, then a disconnect once `leave` is called."""

    def __init__(self, method: str, body: bytes = b"", headers: tuple[tuple[bytes, bytes], ...] = (ACCEPT, JSON)):
        self.scope: Scope = {"type": "http", "method": method, "path": "/mcp", "headers": list(headers)}
        self.body = body
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.chunks: list[bytes] = []
        self.ended = anyio.Event()
        self._gone = anyio.Event()
        self._asked = False

    async def receive(self) -> Message:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = dict(message.get("headers", []))
        else:
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.ended.set()

    def leave(self) -> None:
        self._gone.set()

    def messages(self) -> list[dict[str, Any]]:
        """The JSON-RPC messages of its SSE events, in order."""
        found = []
        for chunk in self.chunks:
            for line in chunk.split(b"\r\n"):
                if line.startswith(b"data: ") and line != b"data: ":
                    found.append(json.loads(line[6:]))
        return found

    def event_ids(self) -> list[str]:
        return [line[4:].decode() for c in self.chunks for line in c.split(b"\r\n") if line.startswith(b"id: ")]


def request(request_id: Any, method: str = "tools/call", **extra: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}, **extra}).encode()


def answer(request_id: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"n": request_id}}).encode()


def version(value: str) -> tuple[bytes, bytes]:
    return (b"mcp-protocol-version", value.encode())


async def started(tg: anyio.abc.TaskGroup, session: HttpSession, call: Call) -> Call:
    tg.start_soon(session.handle, call.scope, call.receive, call.send)
    with anyio.fail_after(5):
        while call.status is None:
            await anyio.sleep(0.001)
    return call


def a_session(owner: Any = None) -> tuple[HttpSession, list[bytes]]:
    session = HttpSession("s-1", lambda _message: owner, SessionEventStore())
    taken: list[bytes] = []
    session.attach(taken.append)
    return session, taken


async def test_a_request_is_answered_on_its_own_stream_which_ends_with_the_answer() -> None:
    session, taken = a_session(owner=7)
    pretty = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"a": 1}}, indent=2).encode()
    async with anyio.create_task_group() as tg:
        call = await started(tg, session, Call("POST", pretty, (ACCEPT, JSON, version("2025-11-25"))))
        assert json.loads(taken[0]) == json.loads(pretty) and b"\n" not in taken[0]  # the relay reads one line
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}}
        session.send(json.dumps(progress, indent=1).encode())  # a server's own whitespace
        session.send(answer(7) + b"\r")  # a line a server ended with CRLF
        with anyio.fail_after(5):
            await call.ended.wait()
    assert call.status == 200 and call.headers[b"content-type"] == b"text/event-stream"
    assert call.headers[b"mcp-session-id"] == b"s-1"
    assert call.messages() == [progress, {"jsonrpc": "2.0", "id": 7, "result": {"n": 7}}]
    assert len(call.event_ids()) == 3  # a priming event first: a 2025-11-25 client can resume from it
    assert call.chunks[0].endswith(b"data: \r\nretry: 1000\r\n\r\n")
    assert b"data: " + answer(7) + b"\r\n\r\n" in call.chunks[-1]  # as the server wrote it, less its CR


async def test_an_older_client_gets_no_priming_event() -> None:
    session, _ = a_session()
    async with anyio.create_task_group() as tg:
        call = await started(tg, session, Call("POST", request(1), (ACCEPT, JSON, version("2025-06-18"))))
        session.send(answer(1))
        with anyio.fail_after(5):
            await call.ended.wait()
    assert call.messages() == [{"jsonrpc": "2.0", "id": 1, "result": {"n": 1}}] and len(call.event_ids()) == 1


async def test_a_notification_or_an_answer_is_taken_with_202() -> None:
    session, taken = a_session()
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    for body in (note, answer(3)):
        call = Call("POST", body)
        assert await session.handle(call.scope, call.receive, call.send) == 202
    assert taken == [note, answer(3)]


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'{"id": 1, "method": "x"}', b'{"jsonrpc": "2.0", "id": 1.5, "method": "x"}', b'{"jsonrpc": "2.0"}'],
)
async def test_a_body_that_is_not_one_message_gets_400_and_reaches_no_one(body: bytes) -> None:
    session, taken = a_session()
    call = Call("POST", body)
    assert await session.handle(call.scope, call.receive, call.send) == 400
    assert json.loads(b"".join(call.chunks))["error"]["code"] == -32602 and taken == []


async def test_a_post_that_cannot_take_an_event_stream_gets_406() -> None:
    session, taken = a_session()
    call = Call("POST", request(1), ((b"accept", b"application/json"), JSON))
    assert await session.handle(call.scope, call.receive, call.send) == 406 and taken == []


async def test_one_get_stream_at_a_time_and_another_once_its_client_left() -> None:
    session, _ = a_session()
    async with anyio.create_task_group() as tg:
        first = await started(tg, session, Call("GET"))
        assert first.status == 200
        second = Call("GET")
        assert await session.handle(second.scope, second.receive, second.send) == 409
        session.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).encode())
        first.leave()
        with anyio.fail_after(5):
            await first.ended.wait()
        third = await started(tg, session, Call("GET"))
        assert third.status == 200
        await session.terminate()
    assert first.messages() == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]


async def test_delete_ends_the_session_and_every_stream() -> None:
    session, _ = a_session()
    async with anyio.create_task_group() as tg:
        pending = await started(tg, session, Call("POST", request(1)))
        delete = Call("DELETE")
        assert await session.handle(delete.scope, delete.receive, delete.send) == 200
        with anyio.fail_after(5):
            await pending.ended.wait()  # no answer will come: its stream ends
    later = Call("POST", request(2))
    assert session.terminated and await session.handle(later.scope, later.receive, later.send) == 404
    put = Call("PUT")
    assert await a_session()[0].handle(put.scope, put.receive, put.send) == 405


async def test_a_dropped_calls_stream_resumes_with_what_it_missed_then_its_live_tail() -> None:
    session, _ = a_session(owner=5)
    async with anyio.create_task_group() as tg:
        call = await started(tg, session, Call("POST", request(5), (ACCEPT, JSON, version("2025-11-25"))))
        session.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"n": 1}}).encode())
        with anyio.fail_after(5):
            while len(call.messages()) < 1:
                await anyio.sleep(0.001)
        last_seen = call.event_ids()[-1]
        call.leave()  # the connection drops; the server goes on
        session.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"n": 2}}).encode())
        resumed = await started(tg, session, Call("GET", headers=(ACCEPT, (b"last-event-id", last_seen.encode()))))
        session.send(answer(5))
        with anyio.fail_after(5):
            await resumed.ended.wait()
            await call.ended.wait()  # the stream it took over ended
    assert [m.get("params", m.get("result")) for m in resumed.messages()] == [{"n": 2}, {"n": 5}]
    assert all("result" not in m for m in call.messages())  # the left stream's writer ended: one answer, there


async def test_closing_lets_every_stream_write_what_it_holds_then_drains() -> None:
    session, _ = a_session()
    async with anyio.create_task_group() as tg:
        call = await started(tg, session, Call("POST", request(4)))
        session.send(answer(4))
        session.close()
        with anyio.fail_after(5):
            await session.drained.wait()
    assert call.messages() == [{"jsonrpc": "2.0", "id": 4, "result": {"n": 4}}]


async def test_requests_with_ids_1_and_string_1_have_streams_of_their_own() -> None:
    """JSON-RPC tells 1 and "1" apart, and so does the session: each answer ends its own request's stream."""
    session, _ = a_session()
    async with anyio.create_task_group() as tg:
        number = await started(tg, session, Call("POST", request(1)))
        text = await started(tg, session, Call("POST", request("1")))
        session.send(answer("1"))
        session.send(answer(1))
        with anyio.fail_after(5):
            await number.ended.wait()
            await text.ended.wait()
    assert number.messages() == [{"jsonrpc": "2.0", "id": 1, "result": {"n": 1}}]
    assert text.messages() == [{"jsonrpc": "2.0", "id": "1", "result": {"n": "1"}}]


class SlowCall(Call):
    """A client that stops reading its stream after the first event until `read_on` is set."""

    def __init__(self, method: str, body: bytes = b"", headers: tuple[tuple[bytes, bytes], ...] = (ACCEPT, JSON)):
        super().__init__(method, body, headers)
        self.read_on = anyio.Event()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and self.chunks:
            await self.read_on.wait()
        await super().send(message)


async def test_a_client_that_stops_reading_holds_its_server_back_and_loses_none_of_its_requests() -> None:
    """A server's requests to a client that reads nothing cannot be dropped as its notifications are: past
    the buffer the server's output waits (its reader paused, as a full pipe holds a stdio server back), and
    is read again once the client has read down to half of it. serve's memory no longer grows with them."""
    session, _ = a_session(owner=7)
    flow: list[str] = []
    session.on_pause, session.on_resume = (lambda: flow.append("pause")), (lambda: flow.append("resume"))
    sent = SESSION_BUFFER + 50
    async with anyio.create_task_group() as tg:
        call = SlowCall("POST", request(7), (ACCEPT, JSON, version("2025-03-26")))
        await started(tg, session, call)
        try:
            for n in range(sent):
                session.send(request(f"roots-{n}", "roots/list"))
                if n < SESSION_BUFFER - 5:
                    assert flow == [], n
            assert flow == ["pause"] and session.queued >= SESSION_BUFFER
        finally:  # the client reads again (a failed check must not leave the stream's last write waiting)
            call.read_on.set()
        with anyio.fail_after(10):
            while flow != ["pause", "resume"]:
                await anyio.sleep(0.001)
        assert session.queued <= SESSION_BUFFER // 2
        session.send(answer(7))
        with anyio.fail_after(10):
            await call.ended.wait()
    got = call.messages()
    assert [m["id"] for m in got[:-1]] == [f"roots-{n}" for n in range(sent)] and got[-1]["id"] == 7


async def test_a_server_that_cannot_be_held_back_gets_its_requests_refused_past_the_buffer() -> None:
    """With --shared-upstream the server is every session's: one client that reads nothing must not hold
    it back for all (no `on_pause`). Past the buffer its requests for that client are answered with an
    error, as the client would answer them, instead of piling up in serve's memory; the ones before it
    reach the client once it reads."""
    session, taken = a_session(owner=7)
    sent = [f"roots-{n}" for n in range(SESSION_BUFFER + 20)]
    async with anyio.create_task_group() as tg:
        call = SlowCall("POST", request(7), (ACCEPT, JSON, version("2025-03-26")))
        await started(tg, session, call)
        try:
            for request_id in sent:
                session.send(request(request_id, "roots/list"))
            assert session.queued <= SESSION_BUFFER
        finally:
            call.read_on.set()
        session.send(answer(7))
        with anyio.fail_after(10):
            await call.ended.wait()
    refused = [json.loads(line) for line in taken[1:]]  # taken[0]: the client's own request
    assert refused and all(r["error"]["message"].startswith("the HTTP client has 4,096 messages") for r in refused)
    delivered = [m["id"] for m in call.messages()[:-1]]
    assert delivered + [r["id"] for r in refused] == sent  # each either reached the client or was refused


async def test_a_quiet_stream_gets_a_keep_alive_comment_and_its_events_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GET stream with nothing to say for PING_SECONDS gets an SSE comment (so that proxies in between keep
    it open), and an event that comes later still arrives on it."""
    monkeypatch.setattr(http_session, "PING_SECONDS", 0.05)
    session, _ = a_session()
    async with anyio.create_task_group() as tg:
        get = await started(tg, session, Call("GET"))
        with anyio.fail_after(5):
            while b": ping\r\n\r\n" not in get.chunks:
                await anyio.sleep(0.01)
        session.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).encode())
        with anyio.fail_after(5):
            while not get.messages():
                await anyio.sleep(0.01)
        await session.terminate()
    assert get.messages() == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
