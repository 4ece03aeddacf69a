"""The audit log's writes, in process: each record fsynced unless turned off, a failed fsync refusing later
requests, and the slow parts of a write (another writer's lock, a foreign tail, a rotation, shaping a large
record) kept off the event loop. Real processes writing one file through AuditLog (a kill -9 mid-write,
four writers at once) and the proxy under a held lock: tests/e2e/test_audit_durability_e2e.py."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mcp_sampling_proxy.audit.recorder import AuditLog


@pytest.mark.parametrize("fsync", [True, "before_answer", False])
def test_each_record_is_fsynced_unless_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool | str
) -> None:
    """`before_answer`: each write returns after its fsync. true: a thread of its own fsyncs soon
    after, and whatever was written is fsync'd by the time the log is closed (the proxy exits)."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=fsync)
    calls: list[tuple[str, int]] = []  # (thread, file size the fsync covered)
    real = os.fsync

    def fsync_spy(fd: int) -> None:
        calls.append((threading.current_thread().name, os.fstat(fd).st_size))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync_spy)
    log.record(server="s", decision="allow")
    log.record(server="s", decision="deny")
    if fsync == "before_answer":
        assert calls == [
            (threading.current_thread().name, size)
            for size in (len(path.read_text().splitlines()[0]) + 1, path.stat().st_size)
        ]
    log.close()
    if fsync is False:
        assert calls == []
    elif fsync is True:
        assert calls and {thread for thread, _ in calls} == {"audit-fsync"}
        assert calls[-1][1] == path.stat().st_size  # the last fsync covered every record


def test_a_failed_background_fsync_makes_the_log_refuse_later_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fails its fsync (EIO) is a log that cannot be trusted to keep records: the
    record already answered stays written, and every later request gets the audit error."""
    import errno

    from mcp_sampling_proxy.audit.chain_file import AuditError

    log = AuditLog(str(tmp_path / "audit.jsonl"), fsync=True)

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    log.record(server="s", decision="allow")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            log.check_usable()
        except AuditError as exc:
            assert "fsync failed: Input/output error" in exc.message
            break
        time.sleep(0.01)
    else:
        pytest.fail("a failed fsync left the log usable")
    # every later record is refused too, not only sampling's (which asks check_usable first):
    # an elicitation's, or one written outside a request
    with pytest.raises(AuditError, match="fsync failed"):
        log.record(server="s", method="elicitation/create", decision="allow")
    log.close()


def test_a_record_outside_a_request_never_waits_for_another_writers_lock(tmp_path: Path) -> None:
    """`record()` outside a request (a 2026-era answer the host gave, seen when it retries) runs
    on the event loop: while another proxy holds the log's lock it returns at once, and the record
    is written when the lock is free (closing the log waits for it)."""
    import asyncio
    import fcntl

    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False)
    other = os.open(str(path) + ".lock", os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX)  # another writer holds the log

    async def on_the_loop() -> None:
        started = time.monotonic()
        log.record(server="s", decision="allow", approver="host")
        assert time.monotonic() - started < 1.0
        await asyncio.sleep(0.3)
        assert "approver" not in path.read_text()  # not written past the lock

    try:
        asyncio.run(on_the_loop())
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
    log.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r.get("approver") for r in records if r.get("event") == "decision"] == ["host"]


def test_a_tail_another_writer_left_is_read_back_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever runs as the user can append to the log (the governed server too), and a torn or
    foreign tail is read back (and sealed) before the next record: as large as they chose. The
    request's write does that in a worker thread, not on the event loop that relays messages."""
    import asyncio

    from mcp_sampling_proxy.audit import chain_file, tail

    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False)
    log.record(server="s", decision="allow")
    with open(path, "ab") as f:
        f.write(b"x" * 4_000_000)  # foreign bytes, no newline
    readers: list[str] = []
    real = tail.read_tail  # what chain_file calls by its module-level name

    def spy(fd: int, size: int) -> Any:
        readers.append(threading.current_thread().name)
        return real(fd, size)

    monkeypatch.setattr(chain_file, "read_tail", spy)

    async def request() -> None:
        async with log.every_ending({"server": "s", "method": "sampling/createMessage"}, {}):
            log.record(decision="allow", reason="served")

    asyncio.run(request())
    log.close()
    assert readers and threading.main_thread().name not in readers, readers
    records = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    assert [r["event"] for r in records][-2:] == ["seal", "decision"]


def test_a_rotation_is_done_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's record that takes the file past audit.max_bytes starts a rotation: renames, an
    fsync of the old file and a read of its tail for the link. The request's write does that in a
    worker thread, not on the event loop that relays messages (the fast path there only appends)."""
    import asyncio

    from mcp_sampling_proxy.audit.chain_file import ChainFile

    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=True, max_bytes=2000)
    log.record(server="s", decision="allow", reason="x" * 1200)
    rotations: list[str] = []
    real = ChainFile._rotate

    def spy(self: Any) -> int:
        rotations.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(ChainFile, "_rotate", spy)

    async def request() -> None:
        async with log.every_ending({"server": "s", "method": "sampling/createMessage"}, {}):
            log.record(decision="allow", reason="y" * 1200)

    asyncio.run(request())
    log.close()
    assert len(rotations) == 1 and rotations[0] != threading.main_thread().name, rotations
    first = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert first["continues"] == "audit.jsonl.1" and first["reason"] == "y" * 1200


def test_a_large_requests_record_is_shaped_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record is shaped (content digests, masks, the key scrub) where it is written. For a small
    request that is the event loop (cheaper than a thread hop); a large one's (the server chooses the
    size: 30 MB took 0.2 s in `none` mode and 5.6 s in `redacted`) is shaped in a worker thread."""
    import asyncio

    from mcp_sampling_proxy.audit import recorder, records

    log = AuditLog(str(tmp_path / "audit.jsonl"), fsync=False, content="redacted")
    shaped_in: list[str] = []
    real = records.content_record  # what recorder calls by its module-level name

    def spy(*args: Any) -> Any:
        shaped_in.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(recorder, "content_record", spy)

    async def request(text: str) -> None:
        params = {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 5}
        async with log.every_ending({"server": "s", "method": "sampling/createMessage"}, params):
            log.record(params=params, decision="allow", reason="served")

    asyncio.run(request("small"))
    asyncio.run(request("x" * 200_000))
    log.close()
    main = threading.main_thread().name
    assert len(shaped_in) == 2 and shaped_in[0] == main and shaped_in[1] != main, shaped_in


def test_the_ending_line_keeps_a_servers_long_id_short(tmp_path: Path) -> None:
    """The one stderr line a request ends with names its id; a string id is the server's to choose, of
    any length and with any characters: the line holds a one-line excerpt of it."""
    import asyncio

    from structlog.testing import capture_logs

    log = AuditLog(str(tmp_path / "audit.jsonl"), fsync=False)
    hostile = "id\x1b[2J" + "x" * 5000

    async def request() -> None:
        fields: Any = {"server": "s", "method": "sampling/createMessage", "request_id": hostile}
        async with log.every_ending(fields, {}):
            log.record(decision="allow", rule="r")

    with capture_logs() as logs:
        asyncio.run(request())
    log.close()
    [ended] = [entry for entry in logs if entry["event"] == "request ended"]
    assert ended["log_level"] == "info" and ended["decision"] == "allow" and ended["rule"] == "r"
    assert len(ended["request_id"]) <= 40 and "\x1b" not in ended["request_id"]
