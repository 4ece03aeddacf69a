"""The bounded per-session event store of `serve`'s Streamable HTTP sessions (resumability).

The store is driven as a session drives it: events in with `store`, a replay out with `replay_after`.
Its counters say what it holds.
"""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.front.event_store import GET_STREAM, EventLimits, ReplayGap, SessionEventStore
from mcp_sampling_proxy.protocol import jsonrpc

pytestmark = pytest.mark.anyio

LIMITS = EventLimits(session_events=40, session_bytes=8_000, stream_events=20, stream_bytes=4_000)


def progress(n: int, pad: int = 0) -> bytes:
    params = {"progressToken": "t", "progress": n, "message": "x" * pad}
    return jsonrpc.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


def result(request_id: int, text: str = "done") -> bytes:
    return jsonrpc.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})


async def replay(store: SessionEventStore, last_event_id: str) -> tuple[str | None, list[tuple[str, bytes]]]:
    sent: list[tuple[str, bytes]] = []

    async def send(event_id: str, payload: bytes) -> None:
        sent.append((event_id, payload))

    stream = await store.replay_after(last_event_id, send)
    return stream, sent


async def test_a_replay_sends_the_streams_later_events_once_in_order_and_no_other_streams() -> None:
    store = SessionEventStore(LIMITS)
    priming = store.store("7", None)
    first = store.store("7", progress(1))
    store.store(GET_STREAM, progress(99))  # another stream's event, between them
    second = store.store("7", progress(2))
    final = store.store("7", result(7))

    stream, sent = await replay(store, first)
    assert stream == "7"
    assert [event_id for event_id, _ in sent] == [second, final]
    assert sent[0][1] == progress(2) and sent[1][1] == result(7)
    stream, sent = await replay(store, priming)  # the priming event itself is never sent again
    assert [event_id for event_id, _ in sent] == [first, second, final]


async def test_events_stored_while_a_replay_runs_are_sent_too() -> None:
    store = SessionEventStore(LIMITS)
    first = store.store("7", progress(1))
    store.store("7", progress(2))
    ids: list[str] = []

    async def send(event_id: str, _payload: bytes) -> None:  # the result arrives while the client is sent step 2
        ids.append(event_id)
        if len(ids) == 1:
            ids.append(store.store("7", result(7)))

    await store.replay_after(first, send)
    assert len(ids) == 3 and ids[1] == ids[2]  # stored, then sent: once


async def test_an_id_from_another_session_or_guessed_is_not_held_and_replays_nothing() -> None:
    mine, theirs = SessionEventStore(LIMITS), SessionEventStore(LIMITS)
    mine.store("1", progress(1))
    their_first = theirs.store("1", progress(1))
    theirs.store("1", result(1, "their secret"))
    mine_first = mine.store("1", progress(2))
    prefix, _, number = mine_first.partition("-")

    for foreign in (their_first, number, f"{prefix}-999", f"{prefix}-x", "", f"{prefix}-{'9' * 40}"):
        assert not mine.holds(foreign), foreign
        assert await replay(mine, foreign) == (None, [])
    assert mine.holds(mine_first)


async def test_a_flood_keeps_the_session_under_its_caps_and_drops_the_oldest() -> None:
    store = SessionEventStore(LIMITS)
    ids = [store.store(f"call-{n % 5}", progress(n, pad=150)) for n in range(2_000)]
    ids += [store.store(GET_STREAM, progress(n, pad=150)) for n in range(2_000)]

    assert store.held_events <= LIMITS.session_events
    assert 0 < store.held_bytes <= LIMITS.session_bytes
    assert store.dropped == 4_000 - store.held_events
    for stream in (GET_STREAM, *(f"call-{n}" for n in range(5))):
        events, size = store.stream_usage(stream)
        assert events <= LIMITS.stream_events and size <= LIMITS.stream_bytes
    assert not store.holds(ids[0]) and store.holds(ids[-1])  # the oldest went, the newest stayed
    assert sum(store.stream_usage(f"call-{n}")[1] for n in range(5)) + store.stream_usage(GET_STREAM)[1] == (
        store.held_bytes
    )


async def test_one_streams_flood_is_capped_per_stream_and_leaves_the_others_alone() -> None:
    store = SessionEventStore(LIMITS)
    kept = store.store("quiet", progress(1))
    for n in range(500):
        store.store("noisy", progress(n, pad=100))
    events, size = store.stream_usage("noisy")
    assert events <= LIMITS.stream_events and size <= LIMITS.stream_bytes
    assert store.holds(kept)


async def test_a_dropped_event_cannot_be_resumed_from() -> None:
    store = SessionEventStore(LIMITS)
    first = store.store("7", progress(1))
    for n in range(2, 2 + LIMITS.stream_events):  # pushes `first` out of its stream
        store.store("7", progress(n))
    assert not store.holds(first)
    assert await replay(store, first) == (None, [])


async def test_an_event_too_big_to_keep_stays_a_marker_and_drops_its_streams_older_events() -> None:
    store = SessionEventStore(LIMITS)
    before = store.store("7", progress(1))
    big = store.store("7", result(7, "x" * 10_000))
    after = store.store("8", result(8))

    assert not store.holds(before)  # a replay from before it would miss it: none is given
    assert store.holds(big)  # after it, a client resumes
    stream, sent = await replay(store, big)
    assert (stream, sent) == ("7", [])
    assert store.holds(after) and store.held_bytes < 1_000


async def test_a_replay_that_would_skip_events_dropped_meanwhile_fails_instead() -> None:
    store = SessionEventStore(LIMITS)
    first = store.store("7", progress(1))
    store.store("7", progress(2))

    async def send(_event_id: str, _payload: bytes) -> None:  # the client reads slowly while the server floods
        for n in range(3, 3 + 3 * LIMITS.stream_events):
            store.store("7", progress(n))

    with pytest.raises(ReplayGap):
        await store.replay_after(first, send)


async def test_a_cleared_store_holds_nothing_and_keeps_nothing_more() -> None:
    store = SessionEventStore(LIMITS)
    first = store.store("7", progress(1))
    store.clear()
    later = store.store("7", progress(2))
    assert store.held_events == store.held_bytes == 0
    assert not store.holds(first) and not store.holds(later)


async def test_the_get_streams_ids_say_so_even_once_dropped_and_cannot_be_forged() -> None:
    store = SessionEventStore(LIMITS)
    on_get = store.store(GET_STREAM, progress(1))
    on_call = store.store("7", progress(1))
    prefix = on_call.rpartition("-")[0]
    assert on_get == f"{prefix}-g1" and on_call == f"{prefix}-2"
    assert store.holds(on_get) and store.was_get_streams(on_get)
    assert not store.was_get_streams(on_call)
    assert not store.holds(f"{prefix}-g2") and not store.holds(f"{prefix}-1")  # the wrong stream's form
    assert not store.was_get_streams(f"{prefix}-g99")  # never issued

    for n in range(LIMITS.stream_events):
        store.store(GET_STREAM, progress(n))
    assert not store.holds(on_get) and store.was_get_streams(on_get)
