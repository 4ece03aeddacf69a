"""The audit log under crashes and concurrency: real processes writing one file through AuditLog, and the
real proxy while another writer holds the log's lock. The writes themselves, in process:
tests/unit/audit/test_audit_durability.py."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

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
    os.sched_yield()  # let another writer in: on a busy machine one could write all its records in one time slice
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


def test_a_slow_audit_write_holds_only_its_own_request(tmp_path: Path) -> None:
    """The audit write (flock + fsync) runs off the event loop: while another process holds the
    log's lock, the host's pings are answered, and the sampling answer waits until its record is
    on disk."""
    import fcntl

    from fakes.llm_server import FakeLLMServer
    from helpers.support import PY, SMALL_SERVER, RawHost, openai_policy, proxy_command, proxy_env, write_policy

    audit = tmp_path / "audit.jsonl"
    with FakeLLMServer("openai") as llm:
        policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit: {{path: {audit}}}\n"))
        with RawHost(
            proxy_command(policy, upstream=[PY, SMALL_SERVER]), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log"
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
