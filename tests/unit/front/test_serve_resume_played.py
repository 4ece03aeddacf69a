"""`serve` resumes a dropped SSE stream (`Last-Event-ID`), per session, and checks MCP-Protocol-Version,
played in process (helpers/played_serve.py `played_sessions`): raw requests for the wire (event ids, the
priming event, the statuses) and the `mcp` SDK's own client, whose connections the in-process transport
cuts as a network would. The tools that pause (`gated_progress`, `log_later`) wait at a gate the test
opens, so a connection is cut between two known events, not after a sleep.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from helpers.played_serve import PlayedSessions, played_sessions
from helpers.serving import ALICE, BOB, token_file
from mcp_types import LoggingMessageNotificationParams

pytestmark = pytest.mark.anyio

VERSION = "2025-11-25"


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[PlayedSessions]:
    async with played_sessions("--token-file", token_file(tmp_path)) as served:
        yield served


# -- the wire ------------------------------------------------------------------------------------


@dataclass
class Event:
    """One SSE event as it came over the wire."""

    id: str | None = None
    data: str = ""
    retry: int | None = None
    fields: list[str] = field(default_factory=list)

    @property
    def message(self) -> dict[str, Any] | None:
        return json.loads(self.data) if self.data else None


async def events(response: httpx2.Response) -> AsyncIterator[Event]:
    event = Event()
    async for line in response.aiter_lines():
        if not line:
            if event.fields:
                yield event
            event = Event()
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        event.fields.append(name)
        if name == "id":
            event.id = value
        elif name == "data":
            event.data = value
        elif name == "retry":
            event.retry = int(value)


@dataclass
class RawSession:
    """A session opened with raw requests, as any HTTP client would."""

    http: httpx2.AsyncClient
    url: str
    token: str
    id: str = ""
    version: str | None = VERSION

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {self.token}"}
        if self.id:
            headers["Mcp-Session-Id"] = self.id
        if self.version is not None:
            headers["MCP-Protocol-Version"] = self.version
        return {**headers, **extra}

    async def open(self) -> None:
        params = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
        version, self.version = self.version, None
        opened = await self.http.post(self.url, json=initialize, headers=self.headers())
        self.version = version
        assert opened.status_code == 200, opened.text
        self.id = opened.headers["mcp-session-id"]
        done = await self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers()
        )
        assert done.status_code == 202

    async def call(self, request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tools/call read to its end: its answer."""
        params = {"name": tool, "arguments": arguments}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        async with self.http.stream("POST", self.url, json=body, headers=self.headers()) as response:
            async for event in events(response):
                message = event.message
                if message is not None and message.get("id") == request_id:
                    return message
        raise AssertionError("the call's stream ended without its answer")

    async def resume(self, last_event_id: str, until: Any) -> list[Event]:
        """GET with Last-Event-ID, as a client does after its connection dropped, again from the last id
        got whenever a stream ends (the server may not have seen the drop yet), until `until(message)`."""
        got: list[Event] = []
        while True:
            headers = self.headers(**{"Last-Event-ID": last_event_id})
            async with self.http.stream("GET", self.url, headers=headers) as response:
                assert response.status_code == 200, (await response.aread()).decode()
                async for event in events(response):
                    if event.id:
                        last_event_id = event.id
                    if event.message is not None:
                        got.append(event)
                        if until(event.message):
                            return got


def tool_call(request_id: int, tool: str, arguments: dict[str, Any], token: str = "p") -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments, "_meta": {"progressToken": token}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@asynccontextmanager
async def raw_session(serve: PlayedSessions, token: str = ALICE) -> AsyncIterator[RawSession]:
    session = RawSession(serve.http, serve.url, token)
    await session.open()
    try:
        yield session
    finally:
        session.version = VERSION
        await serve.http.delete(serve.url, headers=session.headers())


# -- a call's stream ------------------------------------------------------------------------------


async def test_a_calls_dropped_stream_resumes_with_what_it_missed_once_and_in_order(serve: PlayedSessions) -> None:
    async with raw_session(serve) as session:
        before: list[Event] = []
        call = tool_call(3, "gated_progress", {"steps": 4, "gate": "gate"})
        async with session.http.stream("POST", serve.url, json=call, headers=session.headers()) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for event in events(response):
                before.append(event)
                if event.message is not None:
                    break  # the connection drops after progress 1
        serve.gates["gate"].set()  # the rest happens while the client is away

        priming, progress1 = before
        assert priming.id and priming.data == "" and priming.retry == 1000  # 2025-11-25: resumable from the start
        assert progress1.id and progress1.message is not None
        assert progress1.message["params"]["progress"] == 1

        def answered(message: dict[str, Any]) -> bool:
            return message.get("id") == 3

        missed = await session.resume(progress1.id, answered)
        again = await session.resume(priming.id, answered)  # a replay is the same each time

    messages = [event.message for event in missed if event.message is not None]
    assert [m["params"]["progress"] for m in messages[:-1]] == [2, 3, 4]  # each once, in order
    assert messages[-1]["result"]["content"][0]["text"] == "done 4 steps"
    assert all(event.id for event in missed) and len({event.id for event in missed}) == len(missed)
    assert [event.id for event in again] == [progress1.id] + [event.id for event in missed]


# -- the GET stream ------------------------------------------------------------------------------


async def test_the_get_stream_resumes_with_the_notifications_it_missed(serve: PlayedSessions) -> None:
    async with raw_session(serve) as session:
        async with session.http.stream("GET", serve.url, headers=session.headers()) as stream:
            assert stream.status_code == 200
            answer = await session.call(2, "log_later", {"count": 4, "first": "first", "rest": "rest"})
            assert answer["result"]["content"][0]["text"] == "logging later"
            serve.gates["first"].set()  # no call in flight now: the server's log message goes to the GET stream
            async for event in events(stream):
                if event.message is not None:
                    later1 = event
                    break
        serve.gates["rest"].set()

        assert later1.id and later1.message is not None and later1.message["params"]["data"] == "later 1"
        missed = await session.resume(later1.id, lambda message: message["params"]["data"] == "later 4")

    assert [event.message["params"]["data"] for event in missed if event.message] == ["later 2", "later 3", "later 4"]


async def test_an_event_the_session_no_longer_holds_gets_400_and_a_held_one_still_resumes(
    serve: PlayedSessions,
) -> None:
    """A stream holds its latest 1,024 events: resuming from before them would skip some, so the client is
    told to send its request again; from within them, it gets the rest."""
    async with raw_session(serve) as session:
        call = tool_call(4, "progress", {"steps": 1_100})
        async with session.http.stream("POST", serve.url, json=call, headers=session.headers()) as response:
            got = [event async for event in events(response)]
        priming, first, kept = got[0], got[1], got[-52]
        assert kept.message is not None and kept.message["params"]["progress"] == 1_050

        for dropped in (priming, first):
            assert dropped.id is not None
            refused = await session.http.get(serve.url, headers=session.headers(**{"Last-Event-ID": dropped.id}))
            assert refused.status_code == 400
            assert "send the request again" in refused.json()["error"]["message"]
        assert kept.id is not None
        rest = await session.resume(kept.id, lambda message: message.get("id") == 4)

    progress = [event.message["params"]["progress"] for event in rest[:-1] if event.message]
    assert progress == list(range(1_051, 1_101))
    assert rest[-1].message is not None and rest[-1].message["result"]["content"][0]["text"] == "done 1100 steps"


async def test_a_get_stream_resumed_after_events_no_longer_held_goes_on_without_them(
    serve: PlayedSessions, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the server sends on its own keeps coming after a long absence: the GET stream opens afresh
    (the events it missed are gone) instead of a 400 that would end it for good."""
    async with raw_session(serve) as session:
        async with session.http.stream("GET", serve.url, headers=session.headers()) as stream:
            arguments = {"count": 1_101, "first": "first", "rest": "rest", "done": "done"}
            await session.call(2, "log_later", arguments)
            serve.gates["first"].set()
            async for event in events(stream):
                if event.message is not None:
                    later1 = event
                    break
        serve.gates["rest"].set()  # 1,100 more while away: more than the stream keeps
        await serve.gates["done"].wait()
        await session.call(3, "echo", {"text": "after the flood"})  # the server's messages are all in by now

        assert later1.id is not None
        headers = session.headers(**{"Last-Event-ID": later1.id})
        async with session.http.stream("GET", serve.url, headers=headers) as resumed:
            assert resumed.status_code == 200
            await session.call(4, "log_later", {"count": 1, "first": "again", "rest": "again"})
            serve.gates["again"].set()
            async for event in events(resumed):
                if event.message is not None:
                    fresh = event.message
                    break
    assert fresh["params"]["data"] == "later 1"  # the new message, none of the 1,100 gone ones
    assert "a GET stream resumed after events no longer kept" in capsys.readouterr().err


# -- sessions do not share events ------------------------------------------------------------------


async def test_an_event_id_of_another_session_replays_nothing_there(serve: PlayedSessions) -> None:
    async with raw_session(serve, ALICE) as alice, raw_session(serve, ALICE) as alice2, raw_session(serve, BOB) as bob:
        secret = "alice's private progress"
        params = {"name": "echo", "arguments": {"text": secret}}
        body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
        async with alice.http.stream("POST", serve.url, json=body, headers=alice.headers()) as response:
            ids = [event.id async for event in events(response) if event.id]
        assert ids  # the priming event and the answer
        await bob.call(2, "echo", {"text": "bob's own"})  # bob's session has events of its own

        for other in (alice2, bob):  # another session of the same caller, and another caller
            for last in ids:
                refused = await other.http.get(serve.url, headers=other.headers(**{"Last-Event-ID": last}))
                assert refused.status_code == 400
                assert "Last-Event-ID" in refused.json()["error"]["message"]
                assert secret not in refused.text
        # bob with alice's session id and her event id: her session does not exist for him
        stolen = {**bob.headers(**{"Last-Event-ID": ids[0]}), "Mcp-Session-Id": alice.id}
        assert (await bob.http.get(serve.url, headers=stolen)).status_code == 404
        # a made-up id in alice's own format replays nothing either
        prefix = ids[0].rpartition("-")[0]
        made_up = await alice.http.get(serve.url, headers=alice.headers(**{"Last-Event-ID": f"{prefix}-999"}))
        assert made_up.status_code == 400


# -- MCP-Protocol-Version ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "version", "status"),
    [
        ("POST", "2099-01-01", 400),  # unsupported
        ("POST", "2025-13-45", 400),
        ("POST", "2026-07-28", 400),  # the stateless era's version on a session
        ("GET", "2099-01-01", 400),
        ("DELETE", "2099-01-01", 400),
        ("POST", None, 200),  # absent on a session: the spec's fallback (2025-03-26), served
        ("POST", VERSION, 200),
    ],
)
async def test_a_sessions_requests_must_carry_a_version_it_serves(
    serve: PlayedSessions, method: str, version: str | None, status: int
) -> None:
    async with raw_session(serve) as session:
        session.version = version
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        if method == "POST":
            answer = await session.http.post(serve.url, json=listing, headers=session.headers())
        else:
            answer = await session.http.request(method, serve.url, headers=session.headers())
        assert answer.status_code == status, answer.text
        if status == 400:
            assert "MCP-Protocol-Version" in answer.json()["error"]["message"]
        session.version = VERSION
        still = await session.http.post(serve.url, json=listing, headers=session.headers())
        assert still.status_code == 200  # a refused request does not end the session


async def test_a_resuming_get_with_an_unsupported_version_is_refused_before_any_replay(serve: PlayedSessions) -> None:
    async with raw_session(serve) as session:
        body = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        }
        async with session.http.stream("POST", serve.url, json=body, headers=session.headers()) as response:
            ids = [event.id async for event in events(response) if event.id]
        session.version = "2099-01-01"
        refused = await session.http.get(serve.url, headers=session.headers(**{"Last-Event-ID": ids[0]}))
    assert refused.status_code == 400
    assert "unsupported MCP-Protocol-Version" in refused.json()["error"]["message"]


# -- the SDK's client ------------------------------------------------------------------------------


async def test_log_messages_reach_the_sdk_client_on_its_get_stream_after_a_cut(serve: PlayedSessions) -> None:
    """With the SDK's client: its GET stream reconnects with Last-Event-ID after the cut, and the log
    messages it missed arrive, once each."""
    logged: list[str] = []
    got_first, got_all = anyio.Event(), anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logged.append(str(params.data))
        if params.data == "later 1":
            got_first.set()
        if params.data == "later 3":
            got_all.set()

    async with serve.client(ALICE, logging_callback=on_log) as client:
        await client.call_tool("log_later", {"count": 3, "first": "first", "rest": "rest"})
        serve.gates["first"].set()
        await got_first.wait()
        serve.transport.cut()
        serve.gates["rest"].set()
        with anyio.fail_after(10):
            await got_all.wait()
    assert serve.transport.cuts == 1
    assert logged == ["later 1", "later 2", "later 3"]
