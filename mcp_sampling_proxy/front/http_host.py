"""The host's side of 2026-07-28 requests (no session: each POST one request, its answer the body), for
the relay; `json_answer`, how such an answer is written; and `event_stream`, the SSE answer both eras'
streams are written with. A handshake-era session's HTTP is front/http_session.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from msgspec import Struct
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_sampling_proxy.front.inbox import Inbox
from mcp_sampling_proxy.log import Throttle, get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.eras import SUBSCRIPTION_ID_META

log = get_logger("mcp_sampling_proxy.front.http_host")

LISTEN_BUFFER = 256  # notifications a listen stream holds for a caller that reads slower than the server sends

Emit = Callable[[dict[str, Any]], Awaitable[None]]  # sends one message on a stream to the client
ToRelay = Callable[[dict[str, Any], bytes], None]  # a message and its encoding, to the relay (`from_host_message`)


class StatelessHost:
    """Lines to and from one caller's 2026-07-28 requests, where each HTTP POST is one JSON-RPC request
    and its body the answer. Requests go to the relay under private ids (`http-N`): a caller's concurrent
    requests may reuse an id, and the relay must tell their answers apart; the caller gets its own id
    back. A `subscriptions/listen` is answered with a stream (SSE, `listen`): its acknowledgement and the
    notifications that name its subscription. A request whose caller accepts a stream (`call`) is
    answered as the server streams it directly: its progress (by its progress token) and the log messages
    sent while it runs, then its answer, as SSE; when the answer comes before anything else, as plain
    JSON. In this era the server cannot ask the caller anything (the relay turns that into
    `input_required`)."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[dict[str, Any]]] = {}
        self._events: dict[str, anyio.Event] = {}
        # requests answered as streams, by private id: calls (`call`) and subscriptions/listen (`listen`)
        self._calls: dict[str, _Open] = {}
        self._listens: dict[str, _Open] = {}
        self._finals: dict[str, dict[str, Any]] = {}  # an answer that found its stream full
        self._dropped = Throttle(burst=3, window=60.0)
        self._count = 0
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self._waiting) + len(self._listens) + len(self._calls)

    def send(self, line: bytes) -> None:
        """The relay's `to_host`: what `take` takes, encoded."""
        try:
            message = jsonrpc.parse_keeping_integers(line)  # encoded again, under the caller's id
        except ValueError:
            return
        if isinstance(message, dict):
            self.take(message)

    def take(self, message: dict[str, Any]) -> None:
        """A message of the relay's for the caller (also its `answers_to_host`): an answer wakes the request
        waiting for it (or ends its stream), a subscription's notification goes on its listen stream, a
        request's progress and the log messages on the streams of the requests in flight; anything else is
        dropped."""
        if self._to_listen(message) or self._to_call(message):
            return
        if "method" in message:
            return
        slot = self._waiting.get(str(message.get("id")))
        if slot is not None and not slot:
            slot.append(message)
            self._events[str(message.get("id"))].set()

    async def exchange(self, message: dict[str, Any], relay: ToRelay) -> dict[str, Any]:
        """Send one request through the relay and return its answer, under the caller's id."""
        if self.closed:
            return _server_ended(message)
        self._count += 1
        private = f"http-{self._count}"
        slot: list[dict[str, Any]] = []
        self._waiting[private], self._events[private] = slot, anyio.Event()
        try:
            _send(relay, {**message, "id": private})
            await self._events[private].wait()
        except anyio.get_cancelled_exc_class():  # the caller went away: the relay stops the work
            if not slot and not self.closed:
                cancel = {"requestId": private, "reason": "the HTTP client disconnected"}
                _send(relay, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
            raise
        finally:
            del self._waiting[private], self._events[private]
        return {**slot[0], "id": message["id"]}

    def _to_call(self, message: dict[str, Any]) -> bool:
        """Put a streamed request's answer, its progress or a log message on its stream (log messages on
        every one in flight: over stdio nothing says which request a log message belongs to); False when
        none takes it."""
        method = message.get("method")
        if method is None:
            private = str(message.get("id"))
            call = self._calls.get(private)
            if call is None:
                return False
            self._put(private, call, {**message, "id": call.caller_id})
            return True
        params = jsonrpc.as_object(message.get("params"))
        if method == "notifications/progress":
            token = params.get("progressToken")
            targets = [(p, c) for p, c in self._calls.items() if token is not None and c.token == token][:1]
        elif method == "notifications/message":
            targets = list(self._calls.items())
        else:
            return False
        for private, call in targets:
            self._put(private, call, message)  # a caller that reads slowly loses notifications, never the answer
        return bool(targets)

    def _put(self, private: str, opened: _Open, message: dict[str, Any]) -> bool:
        """Put `message` on a stream; an answer that finds it full goes out after what it holds. False when a
        notification was dropped (the stream full)."""
        if opened.inbox.closed or opened.inbox.put(message):
            return True
        if "method" in message:
            return False
        self._finals[private] = message
        opened.inbox.close()
        return True

    async def call(self, message: dict[str, Any], relay: ToRelay) -> Streamed:
        """Send one request through the relay, to be answered as a stream: returns once the first thing for
        it is there (its answer alone: answer it as JSON; a notification first: stream the rest)."""
        meta = jsonrpc.as_object(jsonrpc.as_object(message.get("params")).get("_meta"))
        token = meta.get("progressToken")
        return await self._open(message, relay, self._calls, token, "the HTTP client disconnected")

    def _to_listen(self, message: dict[str, Any]) -> bool:
        """Put a listen's answer, or a notification naming its subscription, on its stream (under the
        caller's id); False when the message is no listen's. A stream holds at most LISTEN_BUFFER
        messages: past that, notifications are dropped (the server is not to fill serve's memory for a
        caller that reads slowly), and the answer waits to go out after them."""
        if "method" in message:
            params = jsonrpc.as_object(message.get("params"))
            meta = jsonrpc.as_object(params.get("_meta"))
            private = str(meta.get(SUBSCRIPTION_ID_META))
            listen = self._listens.get(private)
            if listen is None:
                return False
            message = {**message, "params": {**params, "_meta": {**meta, SUBSCRIPTION_ID_META: listen.caller_id}}}
        else:
            private = str(message.get("id"))
            listen = self._listens.get(private)
            if listen is None:
                return False
            message = {**message, "id": listen.caller_id}
        if not self._put(private, listen, message):
            held = self._dropped.admit()
            if held is not None:
                log.warning(
                    "a subscriptions/listen caller reads slower than its server sends: notifications dropped",
                    buffer=LISTEN_BUFFER,
                    unlogged=held or None,
                )
        return True

    def queued(self, private: str) -> int:
        """How many messages a listen stream holds for its caller now."""
        listen = self._listens.get(private)
        return len(listen.inbox) if listen is not None else 0

    async def listen(self, message: dict[str, Any], relay: ToRelay) -> Streamed:
        """Send a `subscriptions/listen` through the relay; returns once the first thing for it is there:
        an answer alone (the server refused it: answer it as JSON, a 404 for a method it does not have, as
        directly), or its first notification, with the rest to stream until its answer (the server ending
        it), the server's end, or the caller going away (cancelled: the relay is told, so the subscription
        closes)."""
        reason = "the HTTP client closed its subscriptions/listen stream"
        return await self._open(message, relay, self._listens, None, reason)

    async def _open(
        self,
        message: dict[str, Any],
        relay: ToRelay,
        table: dict[str, _Open],
        token: Any,
        reason: str,
    ) -> Streamed:
        """Register a stream for `message` in `table` under a private id, send it and wait for the first thing
        for it: when that is its answer, nothing is left to stream. Ending the stream before the answer
        (`reason`: the caller went away) cancels the request."""
        if self.closed:
            return Streamed(_server_ended(message), None, None)
        self._count += 1
        private = f"http-{self._count}"
        inbox: Inbox[dict[str, Any]] = Inbox(LISTEN_BUFFER)
        table[private] = _Open(inbox, message["id"], token)

        def end(cancel: bool) -> None:
            final = self._finals.pop(private, None)
            if table.pop(private, None) is not None:
                inbox.close()
            if cancel and final is None and not self.closed:  # gone before the answer: the relay stops the work
                params = {"requestId": private, "reason": reason}
                _send(relay, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

        streamed = Streamed(None, inbox, end, lambda: self._finals.get(private))
        assert streamed.rest is not None
        try:
            _send(relay, {**message, "id": private})
            streamed.first = await streamed.rest.receive()
        except anyio.EndOfStream:  # the stream filled before a reader came, or the server ended
            streamed.first = streamed.kept() or _server_ended(message)
        except BaseException:
            streamed.end(cancel=True)
            streamed.rest.close()
            raise
        if "method" not in streamed.first:  # the answer came first: plain JSON, nothing to stream
            streamed.end(cancel=False)
            streamed.rest.close()
            streamed.rest = None
        return streamed

    def close(self, why: str) -> None:
        """Answer every waiting request with an error saying why (the server exited, serve is stopping),
        and end every listen stream."""
        self.closed = True
        for listen in list(self._listens.values()):
            listen.inbox.close()
        for private, call in list(self._calls.items()):
            error = {"code": jsonrpc.UPSTREAM_EXITED, "message": why}
            call.inbox.put({"jsonrpc": "2.0", "id": call.caller_id, "error": error})  # (full: the stream ends)
            call.inbox.close()
            del self._calls[private]
        for private, slot in self._waiting.items():
            if not slot:
                slot.append(
                    {"jsonrpc": "2.0", "id": private, "error": {"code": jsonrpc.UPSTREAM_EXITED, "message": why}}
                )
                self._events[private].set()


class _Open(Struct, frozen=True):
    """A request answered as a stream: where its messages go, the caller's own id, its progress token."""

    inbox: Inbox[dict[str, Any]]
    caller_id: Any
    token: Any = None


def _send(relay: ToRelay, message: dict[str, Any]) -> None:
    relay(message, jsonrpc.dumps(message))


def _server_ended(message: dict[str, Any]) -> dict[str, Any]:
    error = {"code": jsonrpc.UPSTREAM_EXITED, "message": "the server has ended; send the request again"}
    return {"jsonrpc": "2.0", "id": message["id"], "error": error}


class Streamed:
    """A request answered as a stream (`StatelessHost.call`): the first thing that came for it, and, when
    that was not its answer, the rest to come (`drain`)."""

    def __init__(
        self,
        first: dict[str, Any] | None,
        rest: Inbox[dict[str, Any]] | None,
        end: Callable[[bool], None] | None,
        kept: Callable[[], dict[str, Any] | None] = lambda: None,
    ):
        self.first: dict[str, Any] = first or {}
        self.rest = rest
        self._end = end
        self.kept = kept  # the answer that found the stream full

    def end(self, *, cancel: bool) -> None:
        if self._end is not None:
            self._end(cancel)
            self._end = None

    async def drain(self, emit: Emit) -> None:
        """Emit the first message and what follows until the answer (the caller going away cancels it)."""
        answered = False
        try:
            await emit(self.first)
            if self.rest is not None:
                async with self.rest:
                    async for item in self.rest:
                        await emit(item)
                        if "method" not in item:
                            answered = True
                            return
                kept = self.kept()
                if kept is not None:
                    await emit(kept)
                    answered = True
        finally:
            self.end(cancel=not answered)


def json_answer(body: bytes, status: int = 200) -> ASGIApp:
    """An ASGI answer of one JSON body, written as Starlette's Response writes it (its length, its type),
    without building one for each call."""
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def event_stream(produce: Callable[[Emit], Awaitable[None]]) -> ASGIApp:
    """An ASGI answer that streams what `produce` emits as SSE `message` events, until it returns or
    the client disconnects (then `produce` is cancelled)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        gone = anyio.Event()

        async def emit(message: dict[str, Any]) -> None:
            event = b"event: message\ndata: " + jsonrpc.dumps(message) + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})

        async with anyio.create_task_group() as tg:

            async def until_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone.set()
                tg.cancel_scope.cancel()

            tg.start_soon(until_disconnect)
            await produce(emit)
            tg.cancel_scope.cancel()
        if not gone.is_set():
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app
