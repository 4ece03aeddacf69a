"""A small audit log of allowed sampling requests, written by the real AuditLog, for the tests that read
one back (the chain's checks in process, a foreign writer's tail in tests/security)."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from helpers.support import PY, ROOT
from mcp_sampling_proxy.audit.recorder import AuditLog

PARAMS: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "Capital of France?"}}],
    "systemPrompt": "Be brief.",
    "maxTokens": 20,
}
RESULT = {"role": "assistant", "content": {"type": "text", "text": "Paris."}, "model": "m", "stopReason": "endTurn"}


def write_log(path: Path, count: int = 5, **options: Any) -> AuditLog:
    """`count` records of the same allowed request (ids 1..count), each with its own latency."""
    log = AuditLog(str(path), fsync=False, **options)
    for index in range(count):
        log.record(
            params=PARAMS,
            result=RESULT,
            server="srv",
            host="host",
            method="sampling/createMessage",
            request_id=index + 1,
            decision="allow",
            rule="ok",
            provider="p",
            model="m",
            input_tokens=10,
            output_tokens=2,
            latency_ms=100 + index,
            stop_reason="endTurn",
        )
    return log


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def tail_follow(path: Path, *flags: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """`audit tail -f -n 1 FLAGS PATH` as a process, and a queue of the lines it prints (read with a timeout)."""
    proc = subprocess.Popen(
        [PY, "-m", "mcp_sampling_proxy", "audit", "tail", "-f", *flags, "-n", "1", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    return proc, lines


def _pump(stream: IO[str] | None, into: queue.Queue[str]) -> None:
    """A thread's work: each line a child writes, into a queue the test reads with a timeout."""
    assert stream is not None
    for line in stream:
        into.put(line)
