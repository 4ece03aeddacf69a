"""One `serve` session's SSE events, kept so a client whose connection dropped can resume (`Last-Event-ID`).

A session (front/http_session.py) numbers every message it sends on an SSE stream with the id `store`
returns, and on a GET with `Last-Event-ID` asks the store to replay what came after that event on the
same stream (a POST's stream is its request's, the GET stream is one more: `GET_STREAM`).
This store is made per session and cleared when the session ends, so one session can never be handed
another's events; its ids carry a random prefix of the session's own, so an id from another session
(or a guessed one) names nothing here.

Memory is bounded: at most `EventLimits` events and bytes per session and per stream, the oldest
dropped first. Messages are held as their JSON (what the byte caps count), read back only on replay. A
replay is given only when the client's last event is still held: then every later event of its stream
is held too (the oldest go first, and an event too big to hold drops its stream's older events and
stays as an empty marker), so what a client gets is complete, in order and once. Otherwise `holds` says
no and the front answers 400, as the TypeScript SDK does for an id it cannot resume from (the Python
SDK answers an empty stream, which its own client retries forever); but an id of the GET stream
(`-g` before its number) that is no longer held gets a fresh GET stream: what the server sends on its
own keeps coming, and the events the client missed are gone.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable

from msgspec import Struct

from mcp_sampling_proxy.log import get_logger

log = get_logger("mcp_sampling_proxy.front.event_store")

MiB = 1024 * 1024
RETRY_MS = 1000  # the reconnection delay suggested to 2025-11-25 clients (SSE `retry:` of the priming event)
GET_STREAM = "GET"  # the session's GET stream (a request's stream is named by its id as JSON: never this)

Replayed = Callable[[str, bytes], Awaitable[None]]  # (event id, the message's line): one event sent again


class EventLimits(Struct, frozen=True):
    """What one session may hold for replay; past a cap the oldest events go."""

    session_events: int = 2048
    session_bytes: int = 16 * MiB
    stream_events: int = 1024
    stream_bytes: int = 8 * MiB


class _Watch(Struct):
    dropped_through: int = 0  # the newest event of the stream dropped while a replay of it runs


class _Event(Struct):
    seq: int
    stream: str
    payload: bytes | None  # the message's line; None for a priming event or one too big to hold


class ReplayGap(Exception):
    """Events the replay would need were dropped while it ran: ending the stream beats a silent gap."""


class SessionEventStore:
    """One session's events, bounded by `EventLimits`."""

    def __init__(self, limits: EventLimits | None = None):
        self.limits = limits or EventLimits()
        self._prefix = secrets.token_hex(8)
        self._seq = 0
        self._events: OrderedDict[int, _Event] = OrderedDict()  # every held event, oldest first
        self._streams: dict[str, deque[_Event]] = {}
        self._stream_bytes: dict[str, int] = {}
        self._watches: dict[str, list[_Watch]] = {}  # the streams being replayed: what was dropped meanwhile
        self.held_bytes = 0
        self.dropped = 0  # events dropped to stay under the caps, for the session's lifetime
        self.closed = False

    # -- counters ---------------------------------------------------------------------------------
    @property
    def held_events(self) -> int:
        return len(self._events)

    def stream_usage(self, stream_id: str) -> tuple[int, int]:
        """(events, bytes) held for one stream."""
        return len(self._streams.get(stream_id, ())), self._stream_bytes.get(stream_id, 0)

    # -- for the session ----------------------------------------------------------------------------
    def store(self, stream_id: str, payload: bytes | None) -> str:
        """Keep one event of a stream (`payload` None: a priming event, which holds no message); its id."""
        self._seq += 1
        event_id = self._id(stream_id, self._seq)
        if self.closed:  # the session is ending: nothing more is kept
            return event_id
        limits = self.limits
        if payload is not None and len(payload) > min(limits.stream_bytes, limits.session_bytes):
            log.warning(
                "an SSE event is too big to keep for resuming; a client that loses it cannot resume before it",
                bytes=len(payload),
                cap=min(limits.stream_bytes, limits.session_bytes),
            )
            while self._streams.get(stream_id):  # a replay from before it would miss it: none is given
                self._drop(self._streams[stream_id][0])
            payload = None
        event = _Event(self._seq, stream_id, payload)
        size = len(payload or b"")
        self._events[event.seq] = event
        self._streams.setdefault(stream_id, deque()).append(event)
        self._stream_bytes[stream_id] = self._stream_bytes.get(stream_id, 0) + size
        self.held_bytes += size
        stream = self._streams[stream_id]
        while len(stream) > limits.stream_events or self._stream_bytes[stream_id] > limits.stream_bytes:
            self._drop(stream[0])
        while len(self._events) > limits.session_events or self.held_bytes > limits.session_bytes:
            self._drop(next(iter(self._events.values())))
        return event_id

    async def replay_after(self, last_event_id: str, send: Replayed) -> str | None:
        """Send the events of `last_event_id`'s stream that came after it, including any stored while this
        runs; the stream's name, or None (nothing sent) when that event is not held. It returns with no
        wait after its last look: a stream made live by the caller at once misses nothing and gets
        nothing twice."""
        seq = self._seq_of(last_event_id)
        if seq is None:
            return None
        stream_id = self._events[seq].stream
        watch = _Watch()
        self._watches.setdefault(stream_id, []).append(watch)
        try:
            last = seq
            while True:  # what is taken is sent even if dropped meanwhile; what came later must still be held
                if watch.dropped_through > last:
                    raise ReplayGap(f"events after {last_event_id!r} were dropped during the replay")
                pending = [event for event in self._streams.get(stream_id, ()) if event.seq > last]
                if not pending:
                    return stream_id
                for event in pending:
                    if event.payload is not None:
                        await send(self._id(stream_id, event.seq), event.payload)
                    last = event.seq
        finally:
            watches = self._watches[stream_id]
            watches.remove(watch)
            if not watches:
                del self._watches[stream_id]

    def holds(self, event_id: str) -> bool:
        """Whether a replay after `event_id` can be given: the event is this session's and still held."""
        return self._seq_of(event_id) is not None

    def was_get_streams(self, event_id: str) -> bool:
        """Whether `event_id` looks like one this session gave on its GET stream (held or not)."""
        parsed = self._parse(event_id)
        return parsed is not None and parsed[1]

    def clear(self) -> None:
        """The session ended: drop everything and keep nothing more."""
        self.closed = True
        self._events.clear()
        self._streams.clear()
        self._stream_bytes.clear()
        self.held_bytes = 0

    # -- inside -----------------------------------------------------------------------------------
    def _id(self, stream_id: str, seq: int) -> str:
        return f"{self._prefix}-{'g' if stream_id == GET_STREAM else ''}{seq}"

    def _parse(self, event_id: str) -> tuple[int, bool] | None:
        """(its number, whether it is the GET stream's) for an id of this session's form, issued already."""
        prefix, _, number = event_id.partition("-")
        on_get = number.startswith("g")
        number = number.removeprefix("g")
        if prefix != self._prefix or not number.isdigit() or len(number) > 19 or int(number) > self._seq:
            return None
        return int(number), on_get

    def _seq_of(self, event_id: str) -> int | None:
        parsed = self._parse(event_id)
        if parsed is None or parsed[0] not in self._events:
            return None
        seq, on_get = parsed
        return seq if (self._events[seq].stream == GET_STREAM) == on_get else None

    def _drop(self, event: _Event) -> None:
        """Drop an event, which is always the oldest held of its stream."""
        stream = self._streams[event.stream]
        assert stream[0] is event
        stream.popleft()
        del self._events[event.seq]
        size = len(event.payload or b"")
        self._stream_bytes[event.stream] -= size
        self.held_bytes -= size
        for watch in self._watches.get(event.stream, ()):
            watch.dropped_through = event.seq
        self.dropped += 1
        if not stream:
            del self._streams[event.stream], self._stream_bytes[event.stream]
