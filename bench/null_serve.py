#!/usr/bin/env python3
"""A reference for `serve`'s 2026-07-28 stateless requests: the floor an HTTP front on this stack can reach.

    python bench/null_serve.py --listen 127.0.0.1:PORT -- COMMAND...

One server process (COMMAND, a stdio MCP server that takes 2026-07-28 requests as they come; `--handshake`
initializes it first), started at once; then each POST is one JSON-RPC request: parsed with orjson, its id
swapped for one of ours, written to the server's stdin as a line, and answered with the server's line for it
(its id swapped back). uvicorn with httptools on uvloop, as `serve` runs. Nothing is checked (no Host or
Origin, no token, no era, no policy, no tool rules) and nothing is logged: what is left is the HTTP parsing,
the ASGI task, the pipes and the wake-ups that any front on this stack pays. `serve_floor.py` runs it and
`serve` in turns. Not part of the product.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import subprocess
from typing import Any

import orjson
import uvicorn
import uvloop

HANDSHAKE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "null-serve", "version": "1"},
    },
}


class Lines(asyncio.Protocol):
    """The server's stdout, a line at a time, each answer to the request waiting for it."""

    def __init__(self, waiting: dict[int, asyncio.Future[dict[str, Any]]]) -> None:
        self.waiting = waiting
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            message = orjson.loads(line)
            future = self.waiting.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(message)


async def main(host: str, port: int, command: list[str], handshake: bool) -> None:
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
    ids = itertools.count(1)
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    await loop.connect_read_pipe(lambda: Lines(waiting), server.stdout)
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, server.stdin)

    async def exchange(message: dict[str, Any]) -> dict[str, Any]:
        own = next(ids)
        future = loop.create_future()
        waiting[own] = future
        writer.write(orjson.dumps({**message, "id": own}) + b"\n")
        return await future

    if handshake:
        await exchange(HANDSHAKE)
        writer.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        message = orjson.loads(body)
        if "id" not in message:
            writer.write(body + b"\n")
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        answer = await exchange(message)
        out = orjson.dumps({**answer, "id": message["id"]})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    config = uvicorn.Config(
        app, host=host, port=port, lifespan="off", log_config=None, access_log=False, http="httptools"
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        writer.close()
        await asyncio.to_thread(server.wait)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument(
        "--handshake", action="store_true", help="initialize the server first (one that serves only that era)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the stdio server's command")
    args = parser.parse_args()
    listen_host, _, listen_port = args.listen.rpartition(":")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    uvloop.run(main(listen_host, int(listen_port), command, args.handshake))
