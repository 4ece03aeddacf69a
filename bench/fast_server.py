#!/usr/bin/env python3
"""A minimal, fast stdio MCP responder for low-noise relay measurements (not an SDK server).

Answers initialize, ping, tools/list and tools/call for `echo(text)` and `big(size)` with the same
result shapes as tests/fixtures/kitchen_sink_server.py, in a few microseconds per request, so the
proxy's added cost is not buried under the SDK server's ~0.5-1 ms per call and its jitter.

    python bench/bench.py --server-cmd "python bench/fast_server.py"
"""

from __future__ import annotations

import json
import os
import sys

PATTERN = "0123456789abcdef"


def result(request_id: object, payload: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": payload}, separators=(",", ":")).encode()


def text_result(request_id: object, text: str) -> bytes:
    return result(request_id, {"content": [{"type": "text", "text": text}], "isError": False})


def handle(msg: dict) -> bytes | None:
    method = msg.get("method")
    if "id" not in msg or method is None:
        return None
    request_id = msg["id"]
    params = msg.get("params") or {}
    if method == "initialize":
        return result(
            request_id,
            {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "fast-server", "version": "1.0"},
            },
        )
    if method == "ping":
        return result(request_id, {})
    if method == "tools/list":
        return result(
            request_id,
            {
                "tools": [
                    {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
                    {"name": "big", "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                ]
            },
        )
    if method == "tools/call":
        args = params.get("arguments") or {}
        if params.get("name") == "echo":
            return text_result(request_id, str(args.get("text", "")))
        if params.get("name") == "big":
            size = int(args.get("size", 0))
            return text_result(request_id, (PATTERN * (size // len(PATTERN) + 1))[:size])
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"Method not found: {method}"}}
    ).encode()


def write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def main() -> int:
    pending = b""
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return 0
        data = pending + chunk
        lines = data.split(b"\n")
        pending = lines.pop()
        out = []
        for line in lines:
            if line.strip():
                reply = handle(json.loads(line))
                if reply is not None:
                    out.append(reply + b"\n")
        if out:
            write_all(b"".join(out))


if __name__ == "__main__":
    sys.exit(main())
