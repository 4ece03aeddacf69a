"""One client session of `serve` in the handshake era (2025-11-25 and before): its HTTP, in the relay's lines.

The relay sends and receives JSON-RPC lines (bytes); here they meet the Streamable HTTP transport. A
client POSTs one message: a request is answered with an SSE stream that carries what belongs to it and
ends with its answer; a notification or a response is taken with 202. A GET opens the session's one
stream for what belongs to no request; DELETE ends the session.

A message for the client goes on the stream it belongs to, found when the relay sends it (by the time
it is written the relay may have answered its request: a server's last progress comes just before its
result): an answer on its request's, a server request or notification on the stream of the client
request the relay says owns it (`owner`), else on the GET stream. Every event is kept in the session's
event store (front/event_store.py), live stream or not, so a client whose connection dropped resumes a
stream with `Last-Event-ID`: what it missed, then the stream's live tail. Messages pass as the lines
they are: nothing is parsed again for the wire, and an SDK's model drops no key of theirs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mcp_sampling_proxy.front.event_store import GET_STREAM, RETRY_MS, ReplayGap, SessionEventStore
from mcp_sampling_proxy.front.inbox import Inbox
from mcp_sampling_proxy.front.request_checks import accepts, head_of, json_error
from mcp_sampling_proxy.log import Throttle, get_logger
from mcp_sampling_proxy.protocol import jsonrpc

log = get_logger("mcp_sampling_proxy.front.http_session")

SESSION_ID_HEADER = "mcp-session-id"
PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
SESSION_BUFFER = 4096  # messages a session holds for its client: past it, notifications are dropped and the
# server's output waits (`on_pause`) until the client has read down to half of it (`on_resume`)
CLIENT_BEHIND = f"the HTTP client has {SESSION_BUFFER:,} messages it has not read; serve dropped this request"
PING_SECONDS = 15.0  # an SSE comment on a quiet stream, so that proxies in between keep it open
UNNAMED_VERSION = "2025-03-26"  # a request without MCP-Protocol-Version is of this version (the spec's default)
RESUMABLE_FROM = "2025-11-25"  # clients of this version on take a priming event (an id, no data) first

Owner = Callable[[dict[str, Any]], Any]  # a message for the client -> the client request id it belongs to (or None)
Event = tuple[bytes, bool]  # an SSE event as written, and whether it ends its stream (a request's answer)


def stream_of(request_id: Any) -> str:
    """A request's stream name: 1 and "1" are two streams, and none is `GET_STREAM`."""
    return str(request_id) if isinstance(request_id, int) else '"' + str(request_id)


def _event(event_id: str | None, line: bytes) -> bytes:
    head = b"id: " + event_id.encode() + b"\r\n" if event_id is not None else b""
    return head + b"event: message\r\ndata: " + line + b"\r\n\r\n"


class HttpSession:
    """One session's HTTP (`handle`) and its lines to and from the relay (`send`, `attach`)."""

    def __init__(self, session_id: str, owner: Owner, events: SessionEventStore, idle_timeout: float | None = None):
        self.session_id = session_id
        self.events = events
        self._owner = owner
        self._on_line: Callable[[bytes], None] | None = None
        self._live: dict[str, Inbox[Event]] = {}  # the streams a client reads now, by name
        self._idle_timeout = idle_timeout
        self._in_flight = 0
        self.idle_scope = anyio.CancelScope()  # cancelled once no request was in flight for `idle_timeout`
        self.terminated = False
        self._writing = 0  # streams being written
        self._closed = False
        self.drained = anyio.Event()  # set once `close` was called and every stream has ended
        self._dropped = Throttle(burst=3, window=60.0)
        self._headers = [(SESSION_ID_HEADER.encode(), session_id.encode())]
        self.on_pause: Callable[[], None] | None = None  # stop reading the server (its reader's `pause`)
        self.on_resume: Callable[[], None] | None = None
        self._paused = False

    def attach(self, on_line: Callable[[bytes], None]) -> None:
        """Where the client's messages go (the relay's `from_host`): set before the first request is handled."""
        self._on_line = on_line

    # -- to the client ------------------------------------------------------------------------------
    def send(self, line: bytes) -> None:
        """The relay's `to_host`: the message is kept for resuming and put on its stream, if one is read now."""
        try:
            message = jsonrpc.parse(line)
        except ValueError as exc:
            log.error("a message for an HTTP client is not valid JSON; dropped", error=str(exc))
            return
        if not isinstance(message, dict):
            log.error("a message for an HTTP client is not a JSON-RPC message; dropped")
            return
        answer = "method" not in message
        if answer:
            request_id = message.get("id")
            stream = stream_of(request_id) if request_id is not None else GET_STREAM
        else:
            if self.queued >= SESSION_BUFFER and ("id" not in message or self.on_pause is None):
                # a client that reads slower than the server sends: a notification (progress, a log line)
                # is dropped, and so is a request when the server cannot be held back (one shared by every
                # session, --shared-upstream), which is answered with an error: the server cannot fill
                # serve's memory, and waits for no answer. A session's own server is held back instead.
                if "id" in message and self._on_line is not None:
                    self._on_line(jsonrpc.error_response(message["id"], jsonrpc.INTERNAL_ERROR, CLIENT_BEHIND))
                held = self._dropped.admit()
                if held is not None:
                    log.warning(
                        "an HTTP client reads slower than its server sends: notifications and requests dropped",
                        buffer=SESSION_BUFFER,
                        unlogged=held or None,
                    )
                return
            related = self._owner(message)
            stream = stream_of(related) if related is not None else GET_STREAM
        if b"\r" in line or b"\n" in line:  # a server's own whitespace (CRLF ends): an SSE data line holds none
            line = line.strip()
            if b"\r" in line or b"\n" in line:
                line = jsonrpc.dumps(jsonrpc.parse_keeping_integers(line))
        event_id = self.events.store(stream, line)
        live = self._live.get(stream)
        if live is not None:
            live.put((_event(event_id, line), answer and stream != GET_STREAM))  # (closed: its writer just ended)
            if not self._paused and self.on_pause is not None and self.queued >= SESSION_BUFFER:
                # the server's requests and answers cannot be dropped: it waits, as behind a full pipe
                self._paused = True
                log.warning(
                    "an HTTP client reads slower than its server sends: the server waits until it catches up",
                    session=self.session_id[:8],
                    buffer=SESSION_BUFFER,
                )
                self.on_pause()

    @property
    def queued(self) -> int:
        """Messages waiting to be written to the client."""
        return sum(len(live) for live in self._live.values())

    def _caught_up(self) -> None:
        """The client has read down to half the buffer: the server's output is read again."""
        if self._paused and self.queued <= SESSION_BUFFER // 2:
            self._paused = False
            if self.on_resume is not None:
                self.on_resume()

    def close(self) -> None:
        """No more messages: every stream ends once it has written what it holds (`drained`)."""
        self._closed = True
        for live in list(self._live.values()):
            live.close()
        self._live.clear()
        if not self._writing:
            self.drained.set()

    async def terminate(self) -> None:
        """The session ended: every later request of it is answered 404, every stream ends."""
        self.terminated = True
        self.close()

    # -- from the client ----------------------------------------------------------------------------
    async def handle(self, scope: Scope, receive: Receive, send: Send, headers: Mapping[str, str] | None = None) -> int:
        """Answer one HTTP request of this session (`headers`: its headers, when read already); its status. A
        request in flight (an open stream included) holds the session: the idle countdown starts again when
        the last one ends."""
        if self.terminated:
            return await _answer(json_error(404, "Not Found: Session has been terminated"), scope, receive, send)
        self._in_flight += 1
        self.idle_scope.deadline = math.inf
        try:
            return await self._handle(scope, receive, send, head_of(scope) if headers is None else headers)
        finally:
            self._in_flight -= 1
            if not self._in_flight and self._idle_timeout is not None:
                self.idle_scope.deadline = anyio.current_time() + self._idle_timeout

    async def _handle(self, scope: Scope, receive: Receive, send: Send, headers: Mapping[str, str]) -> int:
        method = scope["method"]
        if method == "POST":
            return await self._post(scope, receive, send, headers)
        if method == "GET":
            return await self._get(scope, receive, send, headers)
        if method == "DELETE":
            await self.terminate()
            return await _answer(self._bare(200), scope, receive, send)
        refusal = json_error(405, "Method Not Allowed")
        refusal.headers["Allow"] = "GET, POST, DELETE"
        return await _answer(refusal, scope, receive, send)

    def _bare(self, status: int) -> Response:
        return Response(status_code=status, headers={SESSION_ID_HEADER: self.session_id})

    async def _post(self, scope: Scope, receive: Receive, send: Send, headers: Mapping[str, str]) -> int:
        takes_json, takes_events = accepts(headers)
        if not (takes_json and takes_events):
            refusal = json_error(406, "Not Acceptable: Client must accept both application/json and text/event-stream")
            return await _answer(refusal, scope, receive, send)
        body = (await receive()).get("body", b"")  # read whole already (request_checks.limit_body)
        try:
            message = jsonrpc.parse(body)
        except ValueError as exc:
            return await _answer(json_error(400, f"Parse error: {exc}", jsonrpc.PARSE_ERROR), scope, receive, send)
        problem = _not_a_message(message)
        if problem is not None:
            return await _answer(json_error(400, problem, jsonrpc.INVALID_PARAMS), scope, receive, send)
        line = body.strip()
        if b"\n" in line or b"\r" in line:  # the relay reads lines
            line = jsonrpc.dumps(jsonrpc.parse_keeping_integers(body))
        assert self._on_line is not None, "attach() first"
        if "method" not in message or "id" not in message:  # a notification, or an answer to the server
            self._on_line(line)
            return await _answer(self._bare(202), scope, receive, send)
        if message["method"] == "initialize":
            version = jsonrpc.as_object(message.get("params")).get("protocolVersion")
        else:
            version = headers.get(PROTOCOL_VERSION_HEADER)
        stream = stream_of(message["id"])
        out: Inbox[Event] = Inbox(math.inf)
        self._take(stream, out)
        primed = self.events.store(stream, None) if _resumable(version) else None
        self._on_line(line)
        await self._start(send)
        if primed is not None:
            await send({"type": "http.response.body", "body": _priming(primed), "more_body": True})
        await self._write(stream, out, send)
        return 200

    async def _get(self, scope: Scope, receive: Receive, send: Send, headers: Mapping[str, str]) -> int:
        if not accepts(headers)[1]:
            refusal = json_error(406, "Not Acceptable: Client must accept text/event-stream")
            return await _answer(refusal, scope, receive, send)
        resume = headers.get("last-event-id")
        if resume is None and GET_STREAM in self._live:
            refusal = json_error(409, "Conflict: Only one SSE stream is allowed per session")
            return await _answer(refusal, scope, receive, send)
        out: Inbox[Event] = Inbox(math.inf)
        await self._start(send)
        async with anyio.create_task_group() as tg:  # a GET stream lasts: its client may leave while it is quiet

            async def until_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_gone)
            stream: str | None = GET_STREAM
            ended = False
            if resume is not None:
                stream, ended = await self._replay(resume, send)
            if stream is not None and not ended and not self._closed:
                self._take(stream, out)  # at once after the replay's last look: nothing missed, nothing twice
                await self._write(stream, out, send)
            tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return 200

    async def _replay(self, last_event_id: str, send: Send) -> tuple[str | None, bool]:
        """Send a stream's events after `last_event_id` again: (its name, whether its answer was among
        them); (None, False) when that event is not held, or when events it needs went meanwhile."""
        answered = False

        async def again(event_id: str, line: bytes) -> None:
            nonlocal answered
            await send({"type": "http.response.body", "body": _event(event_id, line), "more_body": True})
            answered = answered or "method" not in jsonrpc.as_object(jsonrpc.parse(line))

        try:
            stream = await self.events.replay_after(last_event_id, again)
        except ReplayGap as exc:  # ending the stream beats a silent gap
            log.warning("a resumed SSE stream ended: " + str(exc), session=self.session_id[:8])
            return None, False
        return stream, answered and stream != GET_STREAM

    # -- the streams --------------------------------------------------------------------------------
    def _take(self, stream: str, out: Inbox[Event]) -> None:
        """Make `out` the stream's live writer; one it replaces (a client resuming a stream it left) ends."""
        if self._closed:
            out.close()
            return
        previous = self._live.get(stream)
        self._live[stream] = out
        if previous is not None:
            previous.close()

    async def _start(self, send: Send) -> None:
        headers = [*_SSE_HEADERS, *self._headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def _write(self, stream: str, inbox: Inbox[Event], send: Send) -> None:
        """Write a stream's events until its answer, its end (the session's, or a resume taking it over) or
        the client leaving; a comment after PING_SECONDS of quiet. A POST's stream is not watched for its
        client leaving: writes to it go nowhere, and its answer ends it."""
        self._writing += 1
        ended = False
        try:
            while True:
                try:
                    event, last = inbox.receive_nowait()
                except anyio.WouldBlock:
                    got = await inbox.receive_within(PING_SECONDS)
                    if got is None:
                        await send({"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True})
                        continue
                    event, last = got
                await send({"type": "http.response.body", "body": event, "more_body": not last})
                if self._paused:
                    self._caught_up()
                if last:  # the answer ended the response
                    ended = True
                    return
        except anyio.EndOfStream:
            pass
        finally:
            if self._live.get(stream) is inbox:
                del self._live[stream]
            inbox.close()
            self._caught_up()  # what this stream held is gone with it
            self._writing -= 1
            if self._closed and not self._writing:
                self.drained.set()
            if stream != GET_STREAM and not ended:
                with anyio.CancelScope(shield=True):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})


_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),  # nginx in front: pass events on as they come
]


def _priming(event_id: str) -> bytes:
    return b"id: " + event_id.encode() + b"\r\ndata: \r\nretry: " + str(RETRY_MS).encode() + b"\r\n\r\n"


def _resumable(version: Any) -> bool:
    """Whether a client of this protocol version takes a priming event (older ones cannot parse its empty data)."""
    return (version if isinstance(version, str) else UNNAMED_VERSION) >= RESUMABLE_FROM


def _not_a_message(message: Any) -> str | None:
    """Why a POST's body is not one JSON-RPC message (None when it is one)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return 'Validation error: the body must be one JSON-RPC 2.0 message (an object with "jsonrpc": "2.0")'
    if "method" in message:
        if not isinstance(message["method"], str):
            return "Validation error: a request's method is a string"
        if "id" in message and not jsonrpc.usable_id(message["id"]):
            return "Validation error: a request's id is a string or an integer"
        if "params" in message and not isinstance(message["params"], dict):
            return "Validation error: params is an object"
        return None
    if "id" in message and ("result" in message) != ("error" in message):
        return None
    return "Validation error: not a request, a notification or an answer"


async def _answer(response: Response, scope: Scope, receive: Receive, send: Send) -> int:
    await response(scope, receive, send)
    return response.status_code
