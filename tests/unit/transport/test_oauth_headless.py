"""The proxy's OAuth for a `--url` upstream, headless, in process: the real upstream (transport/http.py, with
the SDK's OAuth as transport/oauth.py drives it) against the OAuth fixture's authorization server and
protected MCP server served from threads (helpers/oauth_servers.py `AuthServerThread`). The login is made
by `login` run in process, with a stand-in for the browser. Which token is sent, when it is refreshed, the
turn proxies take to refresh one login, and the errors that tell the host to run `login`. Through the
proxy as a process (login's browser hand-off, the keyring, proxies refreshing at once): tests/e2e/test_oauth.py.
"""

from __future__ import annotations

import inspect
import json
import shlex
import stat
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import ObjectReceiveStream
from helpers.oauth_servers import AuthServerThread, InProcessBrowser
from helpers.support import run_subcommand
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.oauth2 import OAuthContext
from structlog.testing import capture_logs

from mcp_sampling_proxy.commands import login as login_command_module
from mcp_sampling_proxy.transport import oauth_store
from mcp_sampling_proxy.transport.http import HttpUpstream
from mcp_sampling_proxy.transport.oauth import _SCOPE
from mcp_sampling_proxy.transport.oauth_store import login_command


@pytest.fixture(scope="module")
def servers() -> Iterator[AuthServerThread]:
    found = AuthServerThread(resource_server=True)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(autouse=True)
def browser(monkeypatch: pytest.MonkeyPatch, servers: AuthServerThread) -> Iterator[InProcessBrowser]:
    """`login`'s browser, and the fixture's settings as each test found them."""
    found = InProcessBrowser()
    monkeypatch.setattr(login_command_module, "open_url", found)
    yield found
    servers.control("/test/config", {"lifetime": 3600, "refresh_delay": 0})


def log_in(servers: AuthServerThread) -> dict[str, Any]:
    """`login --url` as a user runs it (in process); the record it stored."""
    run_subcommand(["login", "--url", servers.url], check=True)
    found = oauth_store.load(servers.url)
    assert found is not None and found[1] == "file"
    return found[0]


def expire(servers: AuthServerThread) -> None:
    """The stored access token expires now, by the stored expiry and for the server: as a token minted an
    hour ago does, without waiting for one."""
    record, kind = oauth_store.load(servers.url) or ({}, "file")
    record["expires_at"] = time.time() - 1
    oauth_store.save(servers.url, record, kind)
    servers.provider.access[record["tokens"]["access_token"]].expires_at = int(time.time()) - 1


def refresh_grants(servers: AuthServerThread) -> int:
    return int(servers.control("/test/stats")["refresh_grants"])


class Host:
    """What the relay does with the upstream: hands it a host's lines and reads what comes back."""

    def __init__(self, upstream: HttpUpstream, answers: ObjectReceiveStream[dict[str, Any]]):
        self.upstream = upstream
        self._answers = answers
        self._ids = 0

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._ids += 1
        message = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params or {}}
        self.upstream.send(json.dumps(message).encode())
        with anyio.fail_after(20):
            async for answer in self._answers:
                if answer.get("id") == self._ids:
                    return answer
        raise AssertionError("the upstream ended without an answer")

    async def initialize(self) -> dict[str, Any]:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
        answer = await self.request("initialize", params)
        if "result" in answer:
            self.upstream.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        return answer

    async def echo(self, text: str) -> dict[str, Any]:
        return await self.request("tools/call", {"name": "echo", "arguments": {"text": text}})


@asynccontextmanager
async def upstream(url: str) -> AsyncIterator[Host]:
    """The proxy's `--url` upstream for `url`, as a proxy started now makes it."""
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](100)
    found = HttpUpstream(url, {})
    await found.attach(lambda line: send.send_nowait(json.loads(line)), send.close)
    try:
        yield Host(found, receive)
    finally:
        await found.stop(1.0)


def echoed(answer: dict[str, Any]) -> str:
    assert "result" in answer, answer
    return str(answer["result"]["content"][0]["text"])


def stored_files() -> list[Any]:
    directory = oauth_store.file_path("http://x/").parent
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


@pytest.mark.anyio
async def test_without_a_login_the_host_gets_an_error_naming_login(servers: AuthServerThread) -> None:
    registrations = servers.control("/test/stats")["registrations"]
    with capture_logs() as logs:
        async with upstream(servers.url) as host:
            error = (await host.initialize())["error"]
            assert f"mcp-sampling-proxy login --url {servers.url}" in error["message"]
            assert "needs an OAuth login" in error["message"]
            assert error["data"]["login"] == f"mcp-sampling-proxy login --url {servers.url}"
            # later requests get the same answer, not a hang or a bare -32603
            assert "login --url" in (await host.request("tools/list"))["error"]["message"]
    (logged,) = [entry for entry in logs if entry["event"].startswith("upstream needs an OAuth login")]
    assert f"mcp-sampling-proxy login --url {servers.url}" in logged["why"]
    # the headless proxy registered no client and opened no browser
    assert servers.control("/test/stats")["registrations"] == registrations
    assert stored_files() == []


@pytest.mark.anyio
async def test_the_stored_login_is_what_the_upstream_sends(servers: AuthServerThread) -> None:
    record = await anyio.to_thread.run_sync(log_in, servers)
    async with upstream(servers.url) as host:
        assert (await host.initialize())["result"]["serverInfo"]["name"] == "oauth-protected"
        whoami = await host.request("tools/call", {"name": "whoami", "arguments": {}})
    assert echoed(whoami) == record["client_info"]["client_id"]


@pytest.mark.anyio
async def test_an_expired_access_token_is_refreshed_headless(servers: AuthServerThread) -> None:
    first = await anyio.to_thread.run_sync(log_in, servers)
    expire(servers)
    refreshes, refused = refresh_grants(servers), servers.unauthorized
    async with upstream(servers.url) as host:
        assert "result" in await host.initialize()
        assert echoed(await host.echo("still here")) == "still here"
    assert refresh_grants(servers) == refreshes + 1
    assert servers.unauthorized == refused  # refreshed by the stored expiry, before the server could refuse it
    second, _ = oauth_store.load(servers.url) or ({}, "file")
    # the rotated tokens were written back, still 0600
    assert second["tokens"]["access_token"] != first["tokens"]["access_token"]
    assert second["tokens"]["refresh_token"] != first["tokens"]["refresh_token"]
    assert second["expires_at"] > time.time() + 3000
    (path,) = stored_files()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_a_token_the_server_no_longer_takes_is_refreshed_mid_session(servers: AuthServerThread) -> None:
    await anyio.to_thread.run_sync(log_in, servers)
    async with upstream(servers.url) as host:
        assert "result" in await host.initialize()
        assert echoed(await host.echo("one")) == "one"
        refreshes = refresh_grants(servers)
        servers.control("/test/revoke-access")  # still "valid" by its expiry: only the 401 tells
        assert echoed(await host.echo("two")) == "two"
    assert refresh_grants(servers) == refreshes + 1


@pytest.mark.anyio
async def test_a_login_made_while_the_proxy_runs_is_picked_up(servers: AuthServerThread) -> None:
    async with upstream(servers.url) as host:
        assert "login --url" in (await host.initialize())["error"]["message"]
        await anyio.to_thread.run_sync(log_in, servers)
        assert (await host.initialize())["result"]["serverInfo"]["name"] == "oauth-protected"
        assert echoed(await host.echo("now")) == "now"


@pytest.mark.anyio
async def test_a_login_whose_refresh_fails_gets_an_error_naming_login(servers: AuthServerThread) -> None:
    await anyio.to_thread.run_sync(log_in, servers)
    servers.control("/test/revoke-refresh")
    expire(servers)
    async with upstream(servers.url) as host:
        error = (await host.initialize())["error"]
    assert "expired and could not be refreshed" in error["message"]
    assert f"mcp-sampling-proxy login --url {servers.url}" in error["message"]


@pytest.mark.anyio
async def test_proxies_refused_a_revoked_token_at_once_take_turns_to_refresh(servers: AuthServerThread) -> None:
    """The server revokes the access token four running proxies share (only a 401 tells them; for a token
    without `expires_in` that is the only refresh there is). Each refreshes after its 401 in turn with the
    others (the turn is a lock on a file beside the login), as on expiry: one refresh, and every proxy's
    call goes through. Refreshing at the same moment left all but one with a spent, rotated refresh token."""
    await anyio.to_thread.run_sync(log_in, servers)
    async with (
        upstream(servers.url) as one,
        upstream(servers.url) as two,
        upstream(servers.url) as three,
        upstream(servers.url) as four,
    ):
        hosts = [one, two, three, four]
        for host in hosts:
            assert "result" in await host.initialize()
        servers.control("/test/revoke-access")
        servers.control("/test/config", {"refresh_delay": 0.3})  # their refreshes would overlap
        before = refresh_grants(servers)
        answers: list[dict[str, Any]] = [{}] * len(hosts)

        async def call(index: int) -> None:
            answers[index] = await hosts[index].echo("through")

        async with anyio.create_task_group() as tg:
            for index in range(len(hosts)):
                tg.start_soon(call, index)
    assert [answer.get("result", {}).get("content", [{}])[0].get("text") for answer in answers] == ["through"] * 4, [
        answer.get("error") for answer in answers
    ]
    assert refresh_grants(servers) - before == 1


def test_the_login_hints_are_safe_to_paste_into_a_shell() -> None:
    """The scope in a login hint comes from the remote server's WWW-Authenticate header: only an
    RFC 6749 scope is repeated, and the URL and scope are quoted for a shell."""
    assert _SCOPE.fullmatch("repo read:org")
    for malformed in ("a\nb", "a\x1b[2Jb", "a  b", "x" * 5000):  # control characters, padding, floods
        assert not _SCOPE.fullmatch(malformed)
    hostile = "x' ; rm -rf ~ ; '"  # legal scope characters, so only quoting keeps it one argument
    command = login_command("https://mcp.example.com/mcp?a=1&b=2", scope=hostile)
    assert shlex.split(command) == [
        "mcp-sampling-proxy",
        "login",
        "--url",
        "https://mcp.example.com/mcp?a=1&b=2",
        "--scope",
        hostile,
    ]


def test_the_sdk_still_has_what_the_headless_flow_builds_on() -> None:
    """HeadlessOAuth (transport/oauth.py) overrides the SDK's private `_auth_flow` and calls private
    helpers of OAuthClientProvider and its context. An `mcp` release that renames one would break
    refresh in the field without failing anything else here: this names what to look at."""
    for name in ("_auth_flow", "_refresh_token", "_handle_refresh_response", "_add_auth_header", "_initialize"):
        assert callable(getattr(OAuthClientProvider, name, None)), f"OAuthClientProvider.{name} is gone"
    assert inspect.isasyncgenfunction(OAuthClientProvider._auth_flow)
    assert "_initialized" in inspect.getsource(OAuthClientProvider.__init__)
    for name in ("can_refresh_token", "clear_tokens", "is_token_valid"):
        assert callable(getattr(OAuthContext, name, None)), f"OAuthContext.{name} is gone"
    fields = set(inspect.signature(OAuthContext).parameters) | set(getattr(OAuthContext, "__dataclass_fields__", {}))
    for name in (
        "storage",
        "current_tokens",
        "client_info",
        "token_expiry_time",
        "oauth_metadata",
        "protected_resource_metadata",
        "protocol_version",
        "lock",
    ):
        assert name in fields, f"OAuthContext.{name} is gone"
