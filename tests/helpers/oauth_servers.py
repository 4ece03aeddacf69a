"""The OAuth fixture (tests/fixtures/oauth_server.py) as a subprocess: an authorization server and an
OAuth-protected MCP server on loopback ports, with the authorization server's test controls; and the
client side of a login for the SDK's OAuthClientProvider (a loopback redirect URI and the scripted
browser)."""

from __future__ import annotations

import selectors
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

from helpers.support import PY, ROOT

OAUTH_SERVER = str(ROOT / "tests" / "fixtures" / "oauth_server.py")
BROWSER_SCRIPT = str(ROOT / "tests" / "fixtures" / "browser.py")


class OAuthServers:
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

    def control(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if body is None and path == "/test/stats":
            return cast(dict[str, Any], httpx.get(self.issuer + path, timeout=5).json())
        return cast(dict[str, Any], httpx.post(self.issuer + path, json=body or {}, timeout=5).json())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()

    def mint(self, **claims: Any) -> str:
        """An access token straight from the authorization server (`/test/mint`), no login."""
        return cast(str, self.control("/test/mint", claims)["access_token"])

    def register_confidential(self, client_id: str, secret: str) -> None:
        """A client with a secret, as a resource server that introspects tokens is registered."""
        self.control(
            "/test/register",
            {"client_id": client_id, "client_secret": secret, "redirect_uris": ["http://127.0.0.1/unused"]},
        )


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
