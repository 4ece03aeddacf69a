"""A 2026-07-28 `subscriptions/listen` stream under a flood: the server behind the proxy can send
notifications for a subscription faster than a slow caller reads them. What waits for the caller is
bounded: past the bound the notifications are dropped (and said so in the log), never held without end."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from starlette.types import Message, Scope

from mcp_sampling_proxy.front.event_store import SessionEventStore
from mcp_sampling_proxy.front.http_host import LISTEN_BUFFER, StatelessHost
from mcp_sampling_proxy.front.http_session import SESSION_BUFFER, HttpSession
from mcp_sampling_proxy.protocol.eras import SUBSCRIPTION_ID_META

pytestmark = pytest.mark.anyio


def notification(private: str, n: int) -> bytes:
    params = {"_meta": {SUBSCRIPTION_ID_META: private}, "n": n}
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params}).encode()


async def test_a_flood_for_a_slow_listener_is_bounded_and_the_stream_goes_on() -> None:
    host = StatelessHost()
    sent: list[bytes] = []
    emitted: list[dict[str, Any]] = []
    reading = anyio.Event()

    async def slow_caller(message: dict[str, Any]) -> None:
        emitted.append(message)
        await reading.wait()  # the caller reads nothing until the flood is over

    listen = {"jsonrpc": "2.0", "id": "mine", "method": "subscriptions/listen", "params": {}}

    async def listening() -> None:
        streamed = await host.listen(listen, lambda _message, line: sent.append(line))
        await streamed.drain(slow_caller)

    async with anyio.create_task_group() as tg:
        tg.start_soon(listening)
        await anyio.sleep(0.01)
        private = json.loads(sent[0])["id"]
        for n in range(10 * LISTEN_BUFFER):  # the server floods the subscription
            host.send(notification(private, n))
        queued = host.queued(private)
        reading.set()
        with anyio.fail_after(5):
            while len(emitted) < queued + 1:
                await anyio.sleep(0.01)
        host.send(json.dumps({"jsonrpc": "2.0", "id": private, "result": {}}).encode())  # the listen ends
    assert queued <= LISTEN_BUFFER
    assert [m["params"]["n"] for m in emitted[:3]] == [0, 1, 2]  # the first ones, in order
    assert emitted[-1] == {"jsonrpc": "2.0", "id": "mine", "result": {}}  # and still its answer, under the caller's id


async def test_a_session_whose_client_reads_slowly_holds_a_bounded_number_of_notifications() -> None:
    """The same flood in a handshake-era session: a client POSTs a request and reads nothing of its SSE
    stream while the server floods its progress. Past the bound the notifications are dropped; the
    answer, and a request of the server's (its own server: held back, not refused), still go out, in
    order, once the client reads again."""
    session = HttpSession("s1", lambda _message: 1, SessionEventStore())  # everything belongs to request 1
    taken: list[bytes] = []
    session.attach(taken.append)
    held: list[str] = []  # the session's own server, which serve holds back as it does (front/endpoint.py)
    session.on_pause, session.on_resume = (lambda: held.append("pause")), (lambda: held.append("resume"))
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow"}}).encode()
    headers = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]
    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    written: list[bytes] = []
    reading = anyio.Event()

    async def receive() -> Message:
        return {"type": "http.request", "body": call, "more_body": False}

    async def send(message: Message) -> None:  # the client reads nothing until the flood is over
        if message["type"] == "http.response.body":
            await reading.wait()
            written.append(message["body"])

    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 0}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.handle, scope, receive, send)
        with anyio.fail_after(5):
            while not taken:  # the request reached the relay
                await anyio.sleep(0.001)
        for _ in range(3 * SESSION_BUFFER):
            session.send(json.dumps(progress).encode())
        assert SESSION_BUFFER - 2 <= session.queued <= SESSION_BUFFER  # (one may be on its way out)
        session.send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "roots/list"}).encode())
        session.send(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode())
        assert session.queued >= SESSION_BUFFER
        reading.set()
    events = [chunk for chunk in written if b"event: message" in chunk]
    assert b'"roots/list"' in events[-2] and b'"result"' in events[-1]
    assert SESSION_BUFFER - 2 <= len(events) - 2 <= SESSION_BUFFER + 1  # the progress kept: the first ones
    assert written[-1] == events[-1]  # the answer ended the stream
    assert held == ["pause", "resume"]  # the request past the bound held the server back until the client read
