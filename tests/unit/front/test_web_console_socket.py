"""The web console's server on a real loopback socket, in process (no process started): what only the
HTTP server itself decides, below the app. A peer that sends nothing is dropped after the socket timeout,
and a Content-Length that is no number gets the app's 413, not a dropped connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread

from mcp_sampling_proxy.approval.console.client import ConsoleClient
from mcp_sampling_proxy.front.web_console.app import MAX_BODY, WebConsole
from mcp_sampling_proxy.front.web_console.server import listen, page_server
from mcp_sampling_proxy.front.web_console.state import WebState
from mcp_sampling_proxy.front.web_console.views import PolicyFacts


def served(tmp_path: Path, peer: Callable[[int], bytes], socket_timeout: float = 60.0) -> bytes:
    """What `peer` (given the port, run in a thread) got from the real server on 127.0.0.1."""
    listener = listen(0)
    state = WebState(PolicyFacts(), dict, None)
    port = listener.getsockname()[1]
    console = WebConsole(
        state, ConsoleClient(tmp_path, state.on_event), port, token="t0ken", socket_timeout=socket_timeout
    )

    async def main() -> bytes:
        server = page_server(console)
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                received = await anyio.to_thread.run_sync(peer, port)
            finally:
                server.should_exit = True
        return received

    return anyio.run(main)


def test_a_silent_connection_is_closed_after_the_socket_timeout(tmp_path: Path) -> None:
    """A peer that connects and sends nothing gets its connection closed, so a few hundred of them
    cannot hold the console's connections for ever (timeout shortened)."""
    took: list[float] = []

    def silent_peer(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as peer:
            started = time.monotonic()
            try:
                return peer.recv(1024)
            finally:
                took.append(time.monotonic() - started)

    assert served(tmp_path, silent_peer, socket_timeout=0.5) == b""  # closed by the console, not by our 10 s wait
    assert took[0] < 5


def test_a_content_length_that_is_no_number_is_refused_in_the_apps_words(tmp_path: Path) -> None:
    def peer(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(
                f"POST /t0ken/api/answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: x\r\n\r\n".encode()
            )
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
            return received

    response = served(tmp_path, peer)
    assert response.startswith(b"HTTP/1.1 413 "), response
    assert f"the body must be 1 to {MAX_BODY} bytes".encode() in response
