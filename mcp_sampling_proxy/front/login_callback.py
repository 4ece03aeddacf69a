"""The loopback address `login` sends the user's browser back to with the authorization code.

It listens on 127.0.0.1 only, on the same HTTP server as `serve` and `console --web` (uvicorn on the
caller's event loop, front/http_server.py), for as long as one login waits. Any program on this machine
can find the port and send a code of its own first: a redirect that does not carry the state of the
authorization request this login sent is answered but ignored, and the login keeps waiting for its own.
"""

from __future__ import annotations

import contextlib
import html
import math
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.auth import AuthorizationCodeResult
from starlette.types import Receive, Scope, Send

from mcp_sampling_proxy.front.http_server import Server, listening_socket, server_config
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.oauth import LoginFailed

HOST = "127.0.0.1"
CALLBACK_PATH = "/callback"
_PAGE = "<!doctype html><meta charset=utf-8><title>mcp-sampling-proxy</title>{}"


@dataclass
class CallbackListener:
    """The redirect address of one login, and the redirects it received, in order."""

    redirect_uri: str
    _redirects: MemoryObjectReceiveStream[dict[str, str]]
    _say: Callable[[str], None]

    async def code(self, state: str | None, timeout: float) -> AuthorizationCodeResult:
        """The code of the redirect carrying `state` (any redirect when None); LoginFailed when the
        authorization server refused, or after `timeout` seconds without one."""
        with anyio.move_on_after(timeout):
            async for params in self._redirects:
                if state is not None and params.get("state") != state:
                    self._say("ignored a request to the redirect address that does not carry this login's state")
                    continue
                if "code" not in params:
                    why = f"{params.get('error', 'no code')} {params.get('error_description', '')}".strip()
                    raise LoginFailed(f"the authorization server refused: {one_line(why, 300)}")
                return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))
        raise LoginFailed(f"the browser did not come back within {timeout:g} s (--timeout)")


@contextlib.asynccontextmanager
async def callback_listener(sock: socket.socket, say: Callable[[str], None]) -> AsyncIterator[CallbackListener]:
    """Serve the redirect address on `sock` (from `listen`) while the block runs, and close it after.
    `say` tells the user of a redirect that was ignored."""
    port = sock.getsockname()[1]
    # unbounded, as a redirect must never be turned away: the login's own may follow a flood of others
    send, receive = anyio.create_memory_object_stream[dict[str, str]](math.inf)
    server = _Listener(server_config(_CallbackApp(send), host=HOST, port=port, log_level="error"), _nothing)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield CallbackListener(f"http://{HOST}:{port}{CALLBACK_PATH}", receive, say)
            finally:
                server.should_exit = True
    finally:
        sock.close()


def listen(port: int) -> socket.socket:
    """The redirect's socket on 127.0.0.1:`port` (0: a free one), listening; OSError when it cannot be had."""
    return listening_socket(HOST, port)


class _Listener(Server):
    """uvicorn leaving the signals alone: Ctrl-C interrupts the login, as it did before it listened."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _nothing() -> None:
    """Nothing streams here: there is nothing to end before connections close."""


class _CallbackApp:
    """Answers the authorization server's redirect with a page saying how the login went, and hands its
    parameters on; every other path is 404."""

    def __init__(self, redirects: MemoryObjectSendStream[dict[str, str]]):
        self._redirects = redirects

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != CALLBACK_PATH or scope["method"] != "GET":
            await _respond(send, 404, "<h1>Not found</h1>")
            return
        query = parse_qs(scope["query_string"].decode("latin-1"))
        params = {key: values[0] for key, values in query.items()}
        if "code" in params:
            body = "<h1>Logged in</h1><p>mcp-sampling-proxy has the authorization; you can close this tab.</p>"
        else:
            error = html.escape(params.get("error", "no code"))
            body = f"<h1>Login failed</h1><p>{error}: {html.escape(params.get('error_description', ''))}</p>"
        await _respond(send, 200 if "code" in params else 400, body)
        self._redirects.send_nowait(params)


async def _respond(send: Send, status: int, body: str) -> None:
    data = _PAGE.format(body).encode()
    headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
