#!/usr/bin/env python3
"""The audit log's own work per request, in-process: one record through `every_ending` and `record`.

Serves N requests the way services/sampling/ does (a record filled inside `AuditLog.every_ending`,
written when the block ends) into an audit file in a temporary directory, and prints the CPU time
per request: shaping, masking, the key scrub, the hash chain and the write. Every request of the
proxy pays it; `sdk_bench.py`'s sampling row measures it together with the LLM call and the pipes,
too noisily on a busy machine to show a change of a few microseconds. fsync is off by default (it
runs in a thread of its own and costs the disk's time, not the proxy's code).

Usage: .venv/bin/python bench/audit_record.py [--requests 5000] [--content none|redacted|full] [--fsync]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields
from mcp_sampling_proxy.log import configure

PARAMS = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello " * 20}}], "maxTokens": 50}
RESULT = {"role": "assistant", "content": {"type": "text", "text": "hi there"}, "model": "m", "stopReason": "endTurn"}
REQUEST: AuditFields = {
    "server": "bench",
    "host": "host",
    "method": "sampling/createMessage",
    "request_id": 1,
    "tool": "echo",
    "protocol_version": "2025-11-25",
    "rule": "allow-all",
}
FULFILLED: AuditFields = {
    **REQUEST,
    "decision": "allow",
    "provider": "fake",
    "model": "m",
    "input_tokens": 3,
    "output_tokens": 4,
    "latency_ms": 1,
    "stop_reason": "endTurn",
}


async def measure(log: AuditLog, requests: int) -> float:
    """CPU seconds per request for `requests` requests."""
    started = time.process_time()
    for _ in range(requests):
        async with log.every_ending(REQUEST, PARAMS):
            log.record(params=PARAMS, result=RESULT, **FULFILLED)
    return (time.process_time() - started) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per round (default 5000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is printed (default 5)")
    parser.add_argument("--content", choices=("none", "redacted", "full"), default="none", help="audit.content")
    parser.add_argument("--fsync", action="store_true", help="audit.fsync: true (the default in a policy)")
    args = parser.parse_args()
    # the audit log's own work: not the "request ended" line each request logs at info level, and nothing
    # on stdout but the figure (structlog unconfigured prints there)
    configure("warning")
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "audit.jsonl")
        log = AuditLog(path, content=args.content, fsync=args.fsync, max_bytes=0)
        try:
            asyncio.run(measure(log, 500))  # warm-up: caches, the first write's open
            rounds = [asyncio.run(measure(log, args.requests)) for _ in range(args.rounds)]
        finally:
            log.close()
        with open(path, "rb") as written_file:
            written = sum(1 for _ in written_file)
    expected = 500 + args.requests * args.rounds
    if written != expected:  # a log that drops records would look fast
        raise SystemExit(f"the audit log holds {written} records, not {expected}")
    print(
        f"audit record: {statistics.median(rounds) * 1e6:.1f} us CPU per request "
        f"(median of {args.rounds} rounds of {args.requests}; range {min(rounds) * 1e6:.1f}-"
        f"{max(rounds) * 1e6:.1f}; content {args.content}, fsync {'on' if args.fsync else 'off'})"
    )


if __name__ == "__main__":
    main()
