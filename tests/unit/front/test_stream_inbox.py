"""The inbox a 2026-07-28 request answered as a stream reads from (front/inbox.py): what anyio's
memory stream did for it, with one reader. In order; bounded, a message handed to a waiting reader not
counted against the bound; closed, what it holds still read, then the end; a reader cancelled loses nothing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mcp_sampling_proxy.front.inbox import Inbox

pytestmark = pytest.mark.anyio


def note(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}}


async def test_messages_come_out_in_order_and_a_closed_inbox_ends_after_what_it_holds() -> None:
    inbox: Inbox[dict[str, Any]] = Inbox(8)
    for n in range(3):
        assert inbox.put(note(n))
    inbox.close()
    assert not inbox.put(note(3))  # closed: nothing more is taken
    assert [m["params"]["progress"] async for m in inbox] == [0, 1, 2]
    with pytest.raises(anyio.EndOfStream):
        await inbox.receive()


async def test_the_bound_counts_what_waits_not_what_a_waiting_reader_was_handed() -> None:
    """As anyio's stream: a reader already waiting is handed the first message, and `size` more wait in the
    buffer; an inbox nobody waits on holds `size`."""
    unread: Inbox[dict[str, Any]] = Inbox(2)
    assert [unread.put(note(n)) for n in range(3)] == [True, True, False]
    assert len(unread) == 2

    waited_on: Inbox[dict[str, Any]] = Inbox(2)
    got: list[dict[str, Any]] = []

    async def reader() -> None:
        got.append(await waited_on.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        assert [waited_on.put(note(n)) for n in range(4)] == [True, True, True, False]
        assert len(waited_on) == 2  # the first is the reader's
    assert got == [note(0)]
    assert len(waited_on) == 2


async def test_a_reader_cancelled_while_waiting_loses_nothing() -> None:
    inbox: Inbox[dict[str, Any]] = Inbox(4)
    with anyio.move_on_after(0.01):
        await inbox.receive()
    assert inbox.put(note(1))
    with anyio.fail_after(1):
        assert await inbox.receive() == note(1)


async def test_leaving_the_block_closes_it() -> None:
    inbox: Inbox[dict[str, Any]] = Inbox(4)
    async with inbox:
        assert inbox.put(note(1))
    assert inbox.closed and not inbox.put(note(2))
    assert await inbox.receive() == note(1)  # what it held is still read


async def test_a_wait_with_a_deadline_gives_none_when_nothing_came_and_the_item_when_one_did() -> None:
    """What a session's stream waits with before it writes a keep-alive comment (PING_SECONDS of quiet)."""
    inbox: Inbox[dict[str, Any]] = Inbox(4)
    with anyio.fail_after(2):
        assert await inbox.receive_within(0.02) is None
    got: list[dict[str, Any] | None] = []

    async def reader() -> None:
        got.append(await inbox.receive_within(5))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        inbox.put(note(7))
    assert got == [note(7)]
    inbox.close()
    with pytest.raises(anyio.EndOfStream):
        await inbox.receive_within(5)
