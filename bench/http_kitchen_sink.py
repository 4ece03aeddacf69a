#!/usr/bin/env python3
"""The kitchen-sink server over Streamable HTTP on the stack `serve` runs on: uvicorn on uvloop, TCP_NODELAY.

    python bench/http_kitchen_sink.py [--port N]    # first stdout line: the port it listens on

The direct mode of bench/serve_bench.py: the same `MCPServer` (tests/fixtures/kitchen_sink_server.py) that
`serve` fronts over stdio, so a comparison shows the path a call takes, not two servers. Not
tests/fixtures/http_server.py as it is: it runs on asyncio's own loop with a listener made with
protocol 0, whose accepted connections asyncio leaves without TCP_NODELAY, so on a keep-alive connection
each SSE answer (headers, then the event, then the end, as separate writes) waits for the client's
delayed ACK: about 40 ms a call, which would be measured as the direct server's latency.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

import anyio
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))

from kitchen_sink_server import mcp  # the fixture, found beside the tests


async def serve(port: int) -> None:
    # IPPROTO_TCP (not 0): accepted sockets inherit it, and the event loop then sets TCP_NODELAY on them
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(512)
    print(sock.getsockname()[1], flush=True)
    app = mcp.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="event loop (default uvloop)")
    args = parser.parse_args()
    anyio.run(serve, args.port, backend="asyncio", backend_options={"use_uvloop": args.loop == "uvloop"})


if __name__ == "__main__":
    main()
