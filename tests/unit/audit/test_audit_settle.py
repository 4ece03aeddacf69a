"""A record made on the event loop while another writer holds the log's lock is finished by a writer
thread; `settle()` waits for it, so what reads the log back in the same process sees every decision."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import pytest

from mcp_sampling_proxy.audit.recorder import AuditLog

pytestmark = pytest.mark.anyio


async def test_a_record_that_waited_for_the_lock_is_in_the_file_once_settled(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path), fsync=False)
    audit.record(server="first", decision="allow")  # the file and its lock exist
    audit.settle()  # (the first record may itself have gone to a thread: the file was new)
    other_writer = os.open(f"{path}.lock", os.O_RDWR)
    fcntl.flock(other_writer, fcntl.LOCK_EX)  # another proxy is writing
    try:
        audit.record(server="second", decision="deny")  # on the loop: handed to a thread, which waits
        servers = [json.loads(line)["server"] for line in path.read_text().splitlines()]
        assert servers == ["first"]  # not yet written: the lock is held
        threading.Timer(0.2, fcntl.flock, (other_writer, fcntl.LOCK_UN)).start()
        audit.settle()
        servers = [json.loads(line)["server"] for line in path.read_text().splitlines()]
        assert servers == ["first", "second"]
    finally:
        os.close(other_writer)
        audit.close()
