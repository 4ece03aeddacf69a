"""The one HTTP server of the project: uvicorn on the caller's event loop, for `serve` and `console --web`.

Both run an ASGI app with uvicorn's `Server.serve()` inside an event loop they already run (anyio, uvloop
when installed), on a socket they bound themselves, so a port in use is reported before anything starts.
What they share is set here once: no lifespan, no logging setup or access log of uvicorn's own (the
request line can hold a secret: the web console's token), a short graceful stop, and a stop that first
ends what never ends on its own (sessions' streams, the console's event streams) before uvicorn waits for
connections to close.

uvicorn catches SIGTERM and SIGINT while it serves and raises them again once it has stopped, to
whatever handled them before: `survive_signal_replay()` makes that handler one that asks the server to
stop (a signal before uvicorn took the signals over stops it as soon as it starts) and otherwise lets
the stop finish.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcp_sampling_proxy.log import get_logger

log = get_logger("mcp_sampling_proxy.http")

GRACEFUL_STOP = 3  # s uvicorn waits for connections to close before it cancels them


def server_config(app: Any, *, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for an app of ours; `options` are more of uvicorn.Config's."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        log_config=None,
        access_log=False,
        # the peer is the connection's: uvicorn would take a client's X-Forwarded-For / Forwarded as its
        # address on loopback, and let any local process name itself anyone in the log
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_STOP,
        **options,
    )


class Server(uvicorn.Server):
    """uvicorn's server, running `before_stop` (ending the responses that never end by themselves) before
    it waits for connections to close."""

    def __init__(self, config: uvicorn.Config, before_stop: Callable[[], Awaitable[None]]):
        super().__init__(config)
        self._before_stop = before_stop

    async def shutdown(self, sockets: Any = None) -> None:
        await self._before_stop()
        await super().shutdown(sockets)


def survive_signal_replay(server: uvicorn.Server) -> None:
    """Handle SIGTERM and SIGINT by asking `server` to stop: before it serves (it then stops as soon as
    it starts), and when uvicorn raises them again after it stopped (the default would kill us before
    what the server ran is stopped: the sessions' servers, the console's sockets)."""

    def stopping(signum: int, _frame: Any) -> None:
        log.debug("stopping", signal=signal.Signals(signum).name)
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stopping)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (`host`, `port`) and listening, so that connections made before the server
    runs wait for it rather than fail; OSError when the address cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def head_deadline(seconds: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with one more limit: a connection whose request head (its request line
    and headers) has not arrived `seconds` after it opened, or after its last response, is closed. uvicorn
    waits for ever for the first request of a connection, so a peer that connects and sends nothing (or
    a byte a minute) would keep its connection, and its file descriptor, as long as it likes."""

    class Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _before: object = None  # the request cycle when the deadline was set: a new one means a head came

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._deadline is not None and self.cycle is not self._before:
                self._disarm()

        def on_response_complete(self) -> None:
            before = self.cycle
            super().on_response_complete()
            if not self.transport.is_closing() and self.cycle is before:  # (a pipelined request has its head)
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._before = self.cycle
            self._deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return Protocol
