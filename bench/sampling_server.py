#!/usr/bin/env python3
"""A minimal stdio MCP server that fires sampling requests one after another and times each.

For `bench/sdk_bench.py`'s sampling row: the proxy in front fulfils each `sampling/createMessage`
with a loopback LLM, so the round trip this server sees is the LLM call plus everything the proxy
adds (two pipe hops, parsing, policy, audit with fsync). Raw JSON lines, no SDK: the server's own
cost is a few microseconds and does not blur the figure.

Tool `sample {count, params}`: send `count` sampling requests with `params`, sequentially; the
result's text is JSON `{"ms": [round trip of each], "errors": [error objects, if any]}`.
Tool `burst {count, params}`: send `count` sampling requests at once and wait for every answer; the
result's text is JSON `{"ms": [the whole burst's wall time], "errors": [...]}`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


class Lines:
    """Newline-delimited JSON from stdin, read with os.read (no buffering surprises)."""

    def __init__(self) -> None:
        self._buf = b""

    def next(self) -> dict[str, Any] | None:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                if line.strip():
                    message: dict[str, Any] = json.loads(line)
                    return message
                continue
            chunk = os.read(0, 1 << 20)
            if not chunk:
                return None
            self._buf += chunk


def send(message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def answer_other(message: dict[str, Any]) -> None:
    """A request that arrives while we wait for a sampling answer: only ping is expected."""
    if "id" in message and message.get("method") == "ping":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
    elif "id" in message and "method" in message:
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "busy sampling"}})


def sample(lines: Lines, count: int, params: Any, counter: list[int]) -> dict[str, Any]:
    times: list[float] = []
    errors: list[Any] = []
    for _ in range(count):
        counter[0] += 1
        request_id = f"s{counter[0]}"
        started = time.perf_counter()
        send({"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage", "params": params})
        while True:
            message = lines.next()
            if message is None:
                raise SystemExit(0)
            if message.get("id") == request_id and "method" not in message:
                break
            answer_other(message)
        times.append((time.perf_counter() - started) * 1000)
        if "error" in message:
            errors.append(message["error"])
    return {"ms": times, "errors": errors}


def burst(lines: Lines, count: int, params: Any, counter: list[int]) -> dict[str, Any]:
    errors: list[Any] = []
    waiting: set[str] = set()
    started = time.perf_counter()
    for _ in range(count):
        counter[0] += 1
        request_id = f"s{counter[0]}"
        waiting.add(request_id)
        send({"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage", "params": params})
    while waiting:
        message = lines.next()
        if message is None:
            raise SystemExit(0)
        if message.get("id") in waiting and "method" not in message:
            waiting.discard(message["id"])
            if "error" in message:
                errors.append(message["error"])
            continue
        answer_other(message)
    return {"ms": [(time.perf_counter() - started) * 1000], "errors": errors}


def main() -> int:
    lines = Lines()
    counter = [0]
    while (message := lines.next()) is not None:
        method, request_id = message.get("method"), message.get("id")
        if method is None or request_id is None:
            continue
        params = message.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench-sampling", "version": "1.0"},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            tools = [{"name": name, "inputSchema": {"type": "object"}} for name in ("sample", "burst")]
            result = {"tools": tools}
        elif method == "tools/call" and params.get("name") in ("sample", "burst"):
            args = params.get("arguments") or {}
            run = sample if params.get("name") == "sample" else burst
            summary = run(lines, int(args.get("count", 1)), args.get("params"), counter)
            result = {"content": [{"type": "text", "text": json.dumps(summary)}], "isError": False}
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
