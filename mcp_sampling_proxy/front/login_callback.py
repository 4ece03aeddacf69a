"""The loopback address `login` sends the user's browser back to with the authorization code.

It listens on 127.0.0.1 only, on the same HTTP server as `serve` and `console --web` (uvicorn on the
caller's event loop, front/http_server.py), for as long as one login waits. Any program on this machine
can find the port and send a code of its own first: a redirect that does not carry the state of the
authorization request this login sent is answered but ignored, and the login keeps waiting for its own.
A flood of such requests costs neither memory nor the user's screen: once the login's state is known
they are dropped as they come, at most `QUEUE` wait to be read before it is, and the user is told of
them once and then at most every `NOTE_EVERY` seconds, with their count.
"""

from __future__ import annotations

import contextlib
import html
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from urllib.parse import parse_qs

import anyio
from mcp.shared.auth import AuthorizationCodeResult
from msgspec import Struct
from starlette.types import Receive, Scope, Send

from mcp_sampling_proxy.front.http_server import Server, listening_socket, server_config
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.oauth import LoginFailed

HOST = "127.0.0.1"
CALLBACK_PATH = "/callback"
QUEUE = 32  # redirects held until the login reads them (its own comes once the browser is opened)
NOTE_EVERY = 5.0  # s between two notes of ignored redirects
IGNORED = "ignored a request to the redirect address that does not carry this login's state"
_PAGE = "<!doctype html><meta charset=utf-8><title>mcp-sampling-proxy</title>{}"


class _Redirects:
    """The redirects received, for the login to read, and those turned away: not this login's (once its
    state is known), or past `QUEUE` unread."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[dict[str, str]](QUEUE)
        self.state: str | None = None
        self.state_known = False
        self.dropped = 0

    def offer(self, params: dict[str, str]) -> None:
        if self.state_known and self.state is not None and params.get("state") != self.state:
            self.dropped += 1
            return
        try:
            self.send.send_nowait(params)
        except anyio.WouldBlock:
            self.dropped += 1


class CallbackListener(Struct):
    """The redirect address of one login, and the redirects it received, in order."""

    redirect_uri: str
    _redirects: _Redirects
    _say: Callable[[str], None]

    async def code(self, state: str | None, timeout: float) -> AuthorizationCodeResult:
        """The code of the redirect carrying `state` (any redirect when None); LoginFailed when the
        authorization server refused, or after `timeout` seconds without one."""
        redirects = self._redirects
        redirects.state, redirects.state_known = state, True
        told, noted_at = 0, -NOTE_EVERY
        with anyio.move_on_after(timeout):
            async for params in redirects.receive:
                ours = state is None or params.get("state") == state
                if not ours:
                    redirects.dropped += 1
                if redirects.dropped > told and time.monotonic() - noted_at >= NOTE_EVERY:
                    more = redirects.dropped - told
                    self._say(IGNORED if told == 0 and more == 1 else f"{IGNORED} ({more} of them)")
                    told, noted_at = redirects.dropped, time.monotonic()
                if not ours:
                    continue
                if "code" not in params:
                    why = f"{params.get('error', 'no code')} {params.get('error_description', '')}".strip()
                    raise LoginFailed(f"the authorization server refused: {one_line(why, 300)}")
                return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))
        others = f"; {redirects.dropped} requests to it did not carry this login's state" if redirects.dropped else ""
        raise LoginFailed(f"the browser did not come back within {timeout:g} s (--timeout){others}")


@contextlib.asynccontextmanager
async def callback_listener(sock: socket.socket, say: Callable[[str], None]) -> AsyncIterator[CallbackListener]:
    """Serve the redirect address on `sock` (from `listen`) while the block runs, and close it after.
    `say` tells the user of redirects that were ignored."""
    port = sock.getsockname()[1]
    redirects = _Redirects()
    server = _Listener(server_config(_CallbackApp(redirects), host=HOST, port=port, log_level="error"), _nothing)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield CallbackListener(f"http://{HOST}:{port}{CALLBACK_PATH}", redirects, say)
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

    def __init__(self, redirects: _Redirects):
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
        self._redirects.offer(params)


async def _respond(send: Send, status: int, body: str) -> None:
    data = _PAGE.format(body).encode()
    headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
