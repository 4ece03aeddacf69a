"""The OAuth fixture (tests/fixtures/oauth_server.py) as a subprocess: an authorization server and an
OAuth-protected MCP server on loopback ports, with the authorization server's test controls; its
authorization server alone served from a thread of the test process (`AuthServerThread`, for tests that
start no process); and the client side of a login for the SDK's OAuthClientProvider (a loopback redirect
URI and the scripted browser)."""

from __future__ import annotations

import importlib.util
import selectors
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import uvicorn
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

from helpers.support import PY, ROOT

OAUTH_SERVER = str(ROOT / "tests" / "fixtures" / "oauth_server.py")
BROWSER_SCRIPT = str(ROOT / "tests" / "fixtures" / "browser.py")


class AuthServerControls:
    """The authorization server's test controls (tests/fixtures/oauth_server.py), over HTTP at `issuer`."""

    issuer: str

    def control(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if body is None and path == "/test/stats":
            return cast(dict[str, Any], httpx.get(self.issuer + path, timeout=5).json())
        return cast(dict[str, Any], httpx.post(self.issuer + path, json=body or {}, timeout=5).json())

    def mint(self, **claims: Any) -> str:
        """An access token straight from the authorization server (`/test/mint`), no login."""
        return cast(str, self.control("/test/mint", claims)["access_token"])

    def register_confidential(self, client_id: str, secret: str) -> None:
        """A client with a secret, as a resource server that introspects tokens is registered."""
        self.control(
            "/test/register",
            {"client_id": client_id, "client_secret": secret, "redirect_uris": ["http://127.0.0.1/unused"]},
        )


class OAuthServers(AuthServerControls):
    def __init__(self, log_path: Path):
        self._log = open(log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, OAUTH_SERVER], stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL
        )
        assert self.proc.stdout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(20):
                self.close()
                raise TimeoutError("the OAuth fixture did not print its ports")
        as_port, rs_port = map(int, self.proc.stdout.readline().split())
        self.issuer = f"http://127.0.0.1:{as_port}"
        self.url = f"http://127.0.0.1:{rs_port}/mcp"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{self.issuer}/test/stats", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()


class AuthServerThread(AuthServerControls):
    """The fixture's authorization server (its `build()`: the same routes, tokens and controls as the
    subprocess's) served by uvicorn from a thread of the test process on a loopback port. A resource server
    played in process (tests/helpers/played_serve.py) reaches it over real HTTP, and the unit tier, which
    starts no process, can use it. With `resource_server`, the fixture's OAuth-protected MCP server is served
    too (from a thread of its own, at `url`): what the proxy's `--url` upstream and `login` talk to."""

    def __init__(self, *, resource_server: bool = False) -> None:
        spec = importlib.util.spec_from_file_location("oauth_server_fixture", OAUTH_SERVER)
        assert spec is not None and spec.loader is not None
        fixture = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fixture)
        self._sockets = [_listen() for _ in range(2 if resource_server else 1)]
        as_port = self._sockets[0].getsockname()[1]
        rs_port = self._sockets[1].getsockname()[1] if resource_server else 9  # 9: discard, never served
        self.issuer = f"http://127.0.0.1:{as_port}"
        self.url = f"http://127.0.0.1:{rs_port}/mcp"
        app, mcp_app, self.provider = fixture.build(as_port, rs_port)
        self._servers = [uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))]
        self.unauthorized = 0  # requests the MCP server answered 401 (no token, or one it does not take)
        if resource_server:  # the MCP server's session manager runs in its lifespan
            counted = self._counting_401s(mcp_app)
            self._servers.append(uvicorn.Server(uvicorn.Config(counted, log_level="warning", lifespan="on")))
        self._threads = [
            threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="oauth-fixture", daemon=True)
            for server, sock in zip(self._servers, self._sockets, strict=True)
        ]
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 10
        while not all(server.started for server in self._servers):
            if not all(thread.is_alive() for thread in self._threads) or time.monotonic() > deadline:
                self.close()
                raise TimeoutError("the in-process OAuth fixture did not start")
            time.sleep(0.01)

    def _counting_401s(self, app: Any) -> Any:
        async def counted(scope: Any, receive: Any, send: Any) -> None:
            async def sent(message: Any) -> None:
                if message["type"] == "http.response.start" and message["status"] == 401:
                    self.unauthorized += 1
                await send(message)

            await app(scope, receive, sent)

        return counted

    def close(self) -> None:
        for server in self._servers:
            server.should_exit = True
        for thread in self._threads:
            thread.join(10)
        for sock in self._sockets:
            sock.close()


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


class LoopbackRedirect:
    """An OAuth client's redirect URI on 127.0.0.1, and the scripted browser (tests/fixtures/browser.py) that
    follows the authorization URL's redirect chain to it: what a desktop MCP client does with a real browser.
    Its `open` and `code` are the SDK's OAuthClientProvider `redirect_handler` and `callback_handler`."""

    def __init__(self) -> None:
        self.visited: list[str] = []
        self._codes: list[dict[str, list[str]]] = []
        codes = self._codes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                codes.append(parse_qs(urlsplit(self.path).query))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"logged in; you can close this page")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = HTTPServer(("127.0.0.1", 0), Handler)
        self.redirect_uri = f"http://127.0.0.1:{self._server.server_address[1]}/callback"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    async def open(self, url: str) -> None:
        self.visited.append(url)
        done = await anyio.run_process([PY, BROWSER_SCRIPT, url], check=False)
        assert done.returncode == 0, done.stderr.decode()

    async def code(self) -> AuthorizationCodeResult:
        assert self._codes, "the browser never reached the redirect URI"
        query = self._codes.pop(0)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class MemoryTokens:
    """The SDK client's TokenStorage, in memory: one test's login."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class InProcessBrowser:
    """What tests/fixtures/browser.py does, from the test process: follows the authorization URL's redirect
    chain (/authorize -> /consent -> the login's loopback redirect) as the user's browser would. It stands
    in for `open_url`, the one place `login` hands a URL to the browser, so `login` runs in process. With
    `forge_first`, another program that found the redirect port sends it a code of its own first."""

    def __init__(self, *, forge_first: bool = False) -> None:
        self.visited: list[str] = []
        self._forge_first = forge_first

    def __call__(self, url: str) -> bool:
        if self._forge_first:
            redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
            httpx.get(redirect, params={"code": "forged-code", "state": "not-this-login"}, timeout=10)
        hooks = {"request": [lambda request: self.visited.append(str(request.url))]}
        with httpx.Client(follow_redirects=True, timeout=30, event_hooks=hooks) as client:
            return client.get(url).status_code == 200
