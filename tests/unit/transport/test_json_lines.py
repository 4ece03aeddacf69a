"""A server that streams an `application/json` answer one message a line, as the conformance suite's
reference server does for a `subscriptions/listen` and a call's notifications (the SDK clients read it):
each message reaches the proxy as it is written, not when the body ends (a listen's never does), and
the request's response last. A body that is one value, over one line or several, is one message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
import pytest

from mcp_sampling_proxy.transport.streamable_http import StreamableHttpClient

pytestmark = pytest.mark.anyio

MODERN = {"MCP-Protocol-Version": "2026-07-28"}


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def exchange(
    body: Callable[[], AsyncIterator[bytes]], request: dict[str, Any], until: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """Send `request` to a server answering with `body` (chunked application/json); the messages the
    proxy gets, once `until` holds for them."""
    got: list[dict[str, Any]] = []
    arrived = anyio.Event()

    def deliver(data: bytes) -> None:
        got.append(json.loads(data))
        if until(got):
            arrived.set()

    async def answer(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=body())

    async with (
        httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as client,
        anyio.create_task_group() as tg,
    ):
        session = StreamableHttpClient(
            "http://server.test/mcp", client, deliver, max_message=1 << 20, tg=tg, on_unreachable=print
        )
        await session.send(request, json.dumps(request).encode(), MODERN)
        with anyio.fail_after(5):
            await arrived.wait()
        tg.cancel_scope.cancel()
    return got


async def test_a_listen_streamed_as_json_lines_is_acknowledged_while_it_stays_open() -> None:
    ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"notifications": {}}}
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}
    hold = anyio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield line(ack)
        await hold.wait()  # the stream stays open: nothing more until a change
        yield line(changed)
        await anyio.sleep_forever()

    request = {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {}}

    def acknowledged(got: list[dict[str, Any]]) -> bool:
        if got and not hold.is_set():
            hold.set()  # the ack arrived while the body was still open: now the change
        return len(got) == 2

    got = await exchange(body, request, acknowledged)
    assert [m["method"] for m in got] == [ack["method"], changed["method"]]


async def test_a_calls_notifications_and_response_as_json_lines_each_arrive_in_order() -> None:
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 50}}
    response = {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "Streaming complete"}]}}

    async def body() -> AsyncIterator[bytes]:
        yield line(progress)[:20]  # a line may come in pieces
        yield line(progress)[20:]
        yield json.dumps(response).encode()  # the last line has no newline

    request = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_streaming_elicitation"}}
    got = await exchange(body, request, lambda got: any("result" in m for m in got))
    assert got == [progress, response]


@pytest.mark.parametrize("indent", [None, 2], ids=["one-line", "pretty-printed"])
async def test_a_json_body_that_is_one_value_is_one_message(indent: int | None) -> None:
    response = {"jsonrpc": "2.0", "id": 4, "result": {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}}
    text = json.dumps(response, indent=indent).encode() + b"\n"

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(text), 7):
            yield text[start : start + 7]

    request = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}
    got = await exchange(body, request, lambda got: bool(got))
    assert got == [response]
