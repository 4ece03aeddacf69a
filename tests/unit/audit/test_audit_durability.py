"""The audit log under crashes and concurrency: real processes writing one file through AuditLog."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.support import PY, ROOT

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.commands import audit as audit_cmd

WRITER = """
import os, sys, time
sys.path.insert(0, ROOT)
from mcp_sampling_proxy.audit.recorder import AuditLog

path, count, size, max_bytes, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
log = AuditLog(path, content="full", fsync=False, max_bytes=max_bytes)
print(log.proxy_id, flush=True)
while not os.path.exists(go):
    time.sleep(0.002)
text = "x" * size
index = 0
while count < 0 or index < count:
    index += 1
    log.record(params={"messages": [{"role": "user", "content": {"type": "text", "text": text}}],
                        "maxTokens": 5},
               server="burst", request_id=index, decision="allow", input_tokens=1, output_tokens=1,
               latency_ms=1)
log.close()
"""


@pytest.fixture
def writer(tmp_path: Path) -> Path:
    script = tmp_path / "writer.py"
    script.write_text(WRITER.replace("ROOT", repr(str(ROOT)), 1))
    return script


def start_writer(
    script: Path, path: Path, count: int, size: int, go: Path, max_bytes: int = 0
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, str(script), str(path), str(count), str(size), str(max_bytes), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def verify(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, str]:
    code = audit_cmd.main(["verify", *map(str, paths)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_kill_9_mid_burst_leaves_at_most_a_torn_last_line_that_the_next_start_seals(
    tmp_path: Path, writer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    go = tmp_path / "go"
    go.touch()
    torn_seen = 0
    for attempt in range(8):  # big records, so the kill lands inside a write
        if attempt >= 3 and torn_seen:
            break
        proc = start_writer(writer, path, -1, 3_000_000 + attempt * 700_001, go)
        assert proc.stdout is not None
        proc.stdout.readline()
        # Kill as soon as a write is seen in progress (the file does not end with a newline), or after
        # a few records at the latest.
        fd = os.open(path, os.O_RDONLY)
        start = os.fstat(fd).st_size
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            size = os.fstat(fd).st_size
            if size > start and (os.pread(fd, 1, size - 1) != b"\n" or size > start + 30_000_000):
                break
        os.kill(proc.pid, signal.SIGKILL)
        os.close(fd)
        proc.wait(10)
        code, _, err = verify(capsys, path)
        if code != 0:  # only the last line may be bad, and only torn
            lines = path.read_bytes().count(b"\n") + 1
            assert f"{path}:{lines}: torn: the last line has no newline" in err, err
            torn_seen += 1
        AuditLog(str(path), fsync=False).close()  # the next start seals a torn tail
        code, _, err = verify(capsys, path)
        assert code == 0, err
    seals = [json.loads(line) for line in path.read_bytes().splitlines() if b'"event":"seal"' in line[:120]]
    assert len(seals) <= torn_seen  # (a write torn just before its newline is completed, not sealed)
    assert torn_seen >= 1  # the kill landed inside a write at least once
    for seal in seals:
        assert seal["torn_bytes"] > 0 and seal["newline_added"] is True


def test_four_writers_share_one_file(tmp_path: Path, writer: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    go = tmp_path / "go"
    procs = [start_writer(writer, path, 200, 300, go) for _ in range(4)]
    ids = [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
    go.touch()
    for proc in procs:
        assert proc.wait(60) == 0
    code, out, err = verify(capsys, path)
    assert code == 0, err
    assert "800 records (800 decisions, 0 seals)" in out
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    decisions = [r for r in records if r["event"] == "decision"]
    assert Counter(r["proxy_id"] for r in decisions) == dict.fromkeys(ids, 200)
    for proxy in ids:
        assert sorted(r["request_id"] for r in decisions if r["proxy_id"] == proxy) == list(range(1, 201))
    interleaved = sum(1 for a, b in itertools.pairwise(decisions) if a["proxy_id"] != b["proxy_id"])
    assert interleaved > 3  # the writers really ran at the same time


def test_four_writers_with_rotation_keep_one_chain(
    tmp_path: Path, writer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    go = tmp_path / "go"
    procs = [start_writer(writer, path, 100, 2000, go, max_bytes=64 * 1024) for _ in range(4)]
    for proc in procs:
        proc.stdout.readline()  # type: ignore[union-attr]
    go.touch()
    for proc in procs:
        assert proc.wait(60) == 0
    rotated = sorted(tmp_path.glob("audit.jsonl.*[0-9]"), key=lambda p: -int(p.suffix[1:]))
    assert len(rotated) >= 4
    code, out, err = verify(capsys, *rotated, path)
    assert code == 0, err
    decisions = sum(int(line.split("(")[1].split(" decisions")[0]) for line in out.splitlines() if ": ok:" in line)
    assert decisions == 400
    assert all(f.stat().st_size <= 64 * 1024 for f in [*rotated, path])


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


def test_a_slow_audit_write_holds_only_its_own_request(tmp_path: Path) -> None:
    """The audit write (flock + fsync) runs off the event loop: while another process holds the
    log's lock, the host's pings are answered, and the sampling answer waits until its record is
    on disk."""
    import fcntl

    from fakes.llm_server import FakeLLMServer
    from helpers.support import KITCHEN_SINK, PY, RawHost, openai_policy, proxy_command, proxy_env, write_policy

    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit: {{path: {audit}}}\n"))
        with RawHost(
            proxy_command(policy, upstream=[PY, KITCHEN_SINK]), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log"
        ) as host:
            host.initialize()
            lock = os.open(str(audit) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)  # another writer holds the log
            try:
                host.send(
                    {
                        "jsonrpc": "2.0",
                        "id": "call",
                        "method": "tools/call",
                        "params": {"name": "sample", "arguments": {"prompt": "hi"}},
                    }
                )
                deadline = time.monotonic() + 15
                while not llm.requests and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert llm.requests, "the LLM was never called"
                for _ in range(5):  # the relay is not stalled by the blocked write
                    assert "result" in host.request("ping", timeout=10)
                assert not any(b'"call"' in line for line in host.raw_received)  # not answered before recorded
                assert not audit.exists() or "sampling/createMessage" not in audit.read_text()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                os.close(lock)
            answer = host.wait_for(lambda m: m.get("id") == "call", timeout=15)
    assert "result" in answer and not answer["result"].get("isError")
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["decision"] for r in records if r.get("method") == "sampling/createMessage"] == ["allow"]


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
