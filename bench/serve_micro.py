#!/usr/bin/env python3
"""serve's own work per relayed call, in-process: the real endpoint `serve` builds from its command line,
its ASGI app called directly, each caller's server answering from memory.

`serve_bench.py` measures serve's CPU per call from /proc over real HTTP (uvicorn's parsing, the socket and
pipe system calls, the wake-ups are in its figure, and its 10 ms clock ticks move it by +-20 us between
runs). This one calls the app `serve` runs (`Front.app` inside `Front.running()`, as commands/serve.py does)
with ASGI messages, and the caller's server is a line server in memory that answers on the event loop's next
turn, as a pipe would; what is left is serve's own Python: the request checks, the endpoint, the caller's
lane and the relay. Steady to a few microseconds, so a change of 10 us shows.

Modes: `stateless` (2026-07-28 callers: each POST one request, its answer the body) and `session`
(handshake-era callers: an initialize opens a session, each call a POST in it). Prints the CPU per call, the
best and the median of `--rounds` rounds; exits non-zero when a call is not answered with its echo (the
requests and their check are serve_bench.py's).

Usage: .venv/bin/python bench/serve_micro.py [--mode stateless|session] [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import orjson
from scratch_dirs import scratch_environment
from serve_bench import HANDSHAKE, STATELESS_HEADERS, call_body, check_echo, session_headers

HOST = "127.0.0.1:8765"  # serve's default --listen: Host names it (the rebinding check passes)


class MemoryServer:
    """A handshake-era MCP server with one tool, `echo`, answering each line on the loop's next turn (a pipe's
    wake-up) instead of from a process: what `Front` starts for each session and lane (runtime.Upstream)."""

    label = "memory-echo"
    reader = None  # no pipe to pause
    writer = None

    def __init__(self) -> None:
        self._on_line: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[], None] | None = None
        self._ended = asyncio.Event()

    async def attach(self, on_line: Any, on_eof: Any, *, max_line: int = 0, on_oversize: Any = None) -> None:
        self._on_line, self._on_eof = on_line, on_eof

    def send(self, line: bytes) -> None:
        message = orjson.loads(line)
        answer = self._answer(message)
        if answer is not None and self._on_line is not None:
            asyncio.get_running_loop().call_soon(self._on_line, orjson.dumps(answer))

    @staticmethod
    def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
        method, request_id = message.get("method"), message.get("id")
        if request_id is None or method is None:
            return None
        if method == "initialize":
            info = {"name": "memory-echo", "version": "1"}
            result = {"protocolVersion": HANDSHAKE, "capabilities": {"tools": {}}, "serverInfo": info}
        elif method == "tools/call":
            text = message["params"]["arguments"]["text"]
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        elif method == "tools/list":
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        else:
            return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}}
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def wait(self, timeout: float) -> int | None:
        with anyio.move_on_after(timeout):
            await self._ended.wait()
        return 0 if self._ended.is_set() else None

    async def stop(self, grace: float, term_wait: float = 2.0) -> int | None:
        self._ended.set()
        if self._on_eof is not None:
            self._on_eof()
            self._on_eof = None
        return 0

    def describe_end(self, code: int | None) -> str:
        return f"exited with status {code}"


async def post(app: Any, body: bytes, headers: dict[str, str]) -> tuple[int, dict[bytes, bytes], bytes]:
    """One POST to /mcp through the ASGI app: its status, headers and whole body."""
    raw = [(b"host", HOST.encode()), (b"accept", b"application/json, text/event-stream")]
    raw += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    sent = False
    done = asyncio.Event()
    status, answer_headers, parts = 0, {}, []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, answer_headers
        if message["type"] == "http.response.start":
            status, answer_headers = message["status"], dict(message.get("headers", []))
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    return status, answer_headers, b"".join(parts)


async def open_session(app: Any) -> dict[str, str]:
    hello = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "serve-micro", "version": "1"}}
    opening = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    status, headers, body = await post(app, opening, {})
    session = headers.get(b"mcp-session-id", b"").decode()
    if status != 200 or not session:
        raise SystemExit(f"initialize answered {status}: {body[:300]!r}")
    ids = session_headers(session)
    status, _, body = await post(app, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', ids)
    if status != 202:
        raise SystemExit(f"notifications/initialized answered {status}: {body[:300]!r}")
    return ids


async def measure(mode: str, calls: int, rounds: int) -> list[float]:
    from mcp_sampling_proxy import log
    from mcp_sampling_proxy.commands.serve import check_setup

    log.configure("warning", "json")
    setup = check_setup(["--", sys.executable, "-c", "pass"], os.environ)
    front = setup.front(start_upstream=MemoryServer)
    cpu: list[float] = []
    async with front.running():
        headers = await open_session(front.app) if mode == "session" else STATELESS_HEADERS
        request_id = 0

        async def run(n: int) -> None:
            nonlocal request_id
            for _ in range(n):
                request_id += 1
                status, _, body = await post(front.app, call_body(request_id, mode == "stateless"), headers)
                check_echo(status, body, request_id, "serve's app")  # (BenchError otherwise)

        await run(200)  # warm-up: the lane's server started, caches filled
        for _ in range(rounds):
            started = time.thread_time()
            await run(calls)
            cpu.append((time.thread_time() - started) / calls)
    await front.adapters.aclose()
    front.audit.close()
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("stateless", "session"), default="stateless")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best and the median are printed (7)")
    args = parser.parse_args()
    with scratch_environment():
        cpu = anyio.run(measure, args.mode, args.calls, args.rounds, backend_options={"use_uvloop": True})
    best, median = min(cpu) * 1e6, statistics.median(cpu) * 1e6
    rounds = f"({args.rounds} rounds of {args.calls})"
    print(f"serve {args.mode}: own CPU per call {best:.1f} us best, {median:.1f} us median {rounds}")


if __name__ == "__main__":
    main()
