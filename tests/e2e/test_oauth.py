"""OAuth for `--url` upstreams, end to end: `login` from a "terminal", then the real proxy process headless.

An authorization server and an OAuth-protected MCP server run on loopback ports in a subprocess
(tests/fixtures/oauth_server.py, built from the SDK's server auth pieces). The browser step is
tests/fixtures/browser.py, a script that follows the authorization URL's redirect chain
(/authorize -> /consent -> the login's 127.0.0.1 redirect) the way a browser would; `login` runs it
through MCP_SAMPLING_PROXY_URL_OPENER, as it would open the user's browser.
"""

from __future__ import annotations

import json
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers.oauth_servers import OAuthServers
from helpers.serving import ALICE, http_host, start_serve, stop
from helpers.support import PROXY, PY, ROOT, RawHost, proxy_env, sdk_host, tool_text

BROWSER = f"{PY} {ROOT / 'tests' / 'fixtures' / 'browser.py'}"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthServers]:
    found = OAuthServers(tmp_path_factory.mktemp("oauth") / "servers.log")
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(autouse=True)
def _token_lifetime(servers: OAuthServers) -> Iterator[None]:
    yield
    servers.control("/test/config", {"lifetime": 3600})


def env_for(state: Path, **extra: str) -> dict[str, str]:
    """The proxy's environment: its own state dir, the scripted browser, and never the user's keyring."""
    return proxy_env(
        **{
            "MCP_SAMPLING_PROXY_STATE_DIR": str(state),
            "MCP_SAMPLING_PROXY_URL_OPENER": BROWSER,
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
            **extra,
        }
    )


def login(servers: OAuthServers, state: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "login", "--url", servers.url, *options],
        env=env_for(state, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def stored(state: Path) -> tuple[Path, dict[str, Any]]:
    files = list((state / "oauth").glob("*.json"))
    assert len(files) == 1, files
    return files[0], json.loads(files[0].read_text())


def url_command(url: str) -> list[str]:
    return [*PROXY, "--log-format", "json", "--url", url]


@pytest.mark.anyio
async def test_login_stores_tokens_0600_and_the_proxy_calls_tools_with_them(
    servers: OAuthServers, tmp_path: Path
) -> None:
    before = servers.control("/test/stats")
    visited = tmp_path / "visited.txt"
    done = login(servers, tmp_path / "state", BROWSER_LOG=str(visited))
    assert done.returncode == 0, done.stderr
    assert "logged in to" in done.stdout and "oauth-protected" in done.stdout
    # the browser went through the authorization server and came back to the login's loopback listener
    chain = visited.read_text().splitlines()
    assert chain[0].startswith(f"{servers.issuer}/authorize?") and "code_challenge_method=S256" in chain[0]
    assert chain[-1].startswith("http://127.0.0.1:") and "/callback?code=" in chain[-1]
    path, record = stored(tmp_path / "state")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = record["tokens"]["access_token"]
    assert record["tokens"]["refresh_token"] and record["client_info"]["client_id"]
    after = servers.control("/test/stats")
    assert after["registrations"] == before["registrations"] + 1  # dynamic client registration
    assert token not in done.stdout + done.stderr

    errlog = tmp_path / "proxy.log"
    with anyio.fail_after(30):
        async with sdk_host(url_command(servers.url), env_for(tmp_path / "state"), errlog) as client:
            assert client.server_info is not None and client.server_info.name == "oauth-protected"
            assert tool_text(await client.call_tool("echo", {"text": "through OAuth"})) == "through OAuth"
            # the call carried the token login got for this registered client
            assert tool_text(await client.call_tool("whoami", {})) == record["client_info"]["client_id"]
    log_text = errlog.read_text()
    assert "upstream ready" in log_text
    assert token not in log_text and record["tokens"]["refresh_token"] not in log_text


@pytest.mark.anyio
async def test_an_expired_access_token_is_refreshed_headless(servers: OAuthServers, tmp_path: Path) -> None:
    servers.control("/test/config", {"lifetime": 1})
    assert login(servers, tmp_path / "state").returncode == 0
    _, first = stored(tmp_path / "state")
    time.sleep(2.1)  # the access token is now expired, for the server and by the stored expiry
    refreshes = servers.control("/test/stats")["refresh_grants"]
    servers.control("/test/config", {"lifetime": 3600})
    with anyio.fail_after(30):
        async with sdk_host(url_command(servers.url), env_for(tmp_path / "state"), tmp_path / "proxy.log") as client:
            assert tool_text(await client.call_tool("echo", {"text": "still here"})) == "still here"
    assert servers.control("/test/stats")["refresh_grants"] == refreshes + 1
    path, second = stored(tmp_path / "state")
    # the rotated tokens were written back, still 0600
    assert second["tokens"]["access_token"] != first["tokens"]["access_token"]
    assert second["tokens"]["refresh_token"] != first["tokens"]["refresh_token"]
    assert second["expires_at"] > time.time() + 3000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_serve_fronts_a_remote_with_the_stored_login(servers: OAuthServers, tmp_path: Path) -> None:
    """`serve --url` uses the login `login --url` stored, as the stdio proxy does: each client session's
    upstream session carries its token."""
    assert login(servers, tmp_path / "state").returncode == 0
    _, record = stored(tmp_path / "state")
    served = start_serve(tmp_path, upstream=["--url", servers.url], env=env_for(tmp_path / "state"))
    try:
        async with http_host(served.url, ALICE) as client:
            assert tool_text(await client.call_tool("whoami", {})) == record["client_info"]["client_id"]
    finally:
        stop(served)
    assert record["tokens"]["access_token"] not in served.errlog.read_text()


def test_without_a_login_the_host_gets_an_error_naming_login(servers: OAuthServers, tmp_path: Path) -> None:
    errlog = tmp_path / "proxy.log"
    with RawHost(url_command(servers.url), env_for(tmp_path / "state"), errlog) as host:
        answer = host.initialize()
        error = answer["error"]
        assert f"mcp-sampling-proxy login --url {servers.url}" in error["message"]
        assert "needs an OAuth login" in error["message"]
        assert error["data"]["login"] == f"mcp-sampling-proxy login --url {servers.url}"
        # later requests get the same answer, not a hang or a bare -32603
        listed = host.request("tools/list")
        assert "login --url" in listed["error"]["message"]
        host.close_stdin()
        host.wait()
    log_text = errlog.read_text()
    assert f"mcp-sampling-proxy login --url {servers.url}" in log_text
    assert "upstream ready" not in log_text
    # the headless proxy registered no client and opened no browser
    assert not (tmp_path / "state" / "oauth").exists() or not list((tmp_path / "state" / "oauth").iterdir())


@pytest.mark.anyio
async def test_a_token_the_server_no_longer_takes_is_refreshed_mid_session(
    servers: OAuthServers, tmp_path: Path
) -> None:
    assert login(servers, tmp_path / "state").returncode == 0
    with anyio.fail_after(30):
        async with sdk_host(url_command(servers.url), env_for(tmp_path / "state"), tmp_path / "proxy.log") as client:
            assert tool_text(await client.call_tool("echo", {"text": "one"})) == "one"
            refreshes = servers.control("/test/stats")["refresh_grants"]
            servers.control("/test/revoke-access")  # still "valid" by its expiry: only the 401 tells
            assert tool_text(await client.call_tool("echo", {"text": "two"})) == "two"
    assert servers.control("/test/stats")["refresh_grants"] == refreshes + 1


def test_a_login_made_while_the_proxy_runs_is_picked_up(servers: OAuthServers, tmp_path: Path) -> None:
    with RawHost(url_command(servers.url), env_for(tmp_path / "state"), tmp_path / "proxy.log") as host:
        assert "login --url" in host.initialize()["error"]["message"]
        assert login(servers, tmp_path / "state").returncode == 0
        assert host.initialize()["result"]["serverInfo"]["name"] == "oauth-protected"
        called = host.request("tools/call", {"name": "echo", "arguments": {"text": "now"}})
        assert called["result"]["content"][0]["text"] == "now"


def test_a_login_whose_refresh_fails_gets_an_error_naming_login(servers: OAuthServers, tmp_path: Path) -> None:
    servers.control("/test/config", {"lifetime": 1})
    assert login(servers, tmp_path / "state").returncode == 0
    servers.control("/test/revoke-refresh")
    time.sleep(2.1)
    errlog = tmp_path / "proxy.log"
    with RawHost(url_command(servers.url), env_for(tmp_path / "state"), errlog) as host:
        error = host.initialize()["error"]
        assert "expired and could not be refreshed" in error["message"]
        assert f"mcp-sampling-proxy login --url {servers.url}" in error["message"]
    assert "upstream ready" not in errlog.read_text()


def test_a_pre_registered_client_id_is_used_instead_of_registration(servers: OAuthServers, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    servers.control(
        "/test/register",
        {
            "client_id": "pre-registered-proxy",
            "client_secret": "s3cret-value-123",
            "redirect_uris": [f"http://127.0.0.1:{port}/callback"],
        },
    )
    before = servers.control("/test/stats")["registrations"]
    done = login(
        servers,
        tmp_path / "state",
        "--client-id",
        "pre-registered-proxy",
        "--client-secret-env",
        "TEST_CLIENT_SECRET",
        "--port",
        str(port),
        TEST_CLIENT_SECRET="s3cret-value-123",
    )
    assert done.returncode == 0, done.stderr
    assert servers.control("/test/stats")["registrations"] == before
    _, record = stored(tmp_path / "state")
    assert record["client_info"]["client_id"] == "pre-registered-proxy"


@pytest.mark.anyio
async def test_with_a_working_keyring_the_login_lives_there(servers: OAuthServers, tmp_path: Path) -> None:
    secrets_file = tmp_path / "keyring.json"
    keyring_env = {
        "PYTHON_KEYRING_BACKEND": "file_keyring.FileKeyring",
        "TEST_KEYRING_FILE": str(secrets_file),
        "PYTHONPATH": str(ROOT / "tests" / "fixtures"),
    }
    done = login(servers, tmp_path / "state", **keyring_env)
    assert done.returncode == 0, done.stderr
    assert "the OS keyring" in done.stdout
    assert not list((tmp_path / "state").glob("oauth/*.json"))  # no file copy
    [(key, text)] = json.loads(secrets_file.read_text()).items()
    assert key == f"mcp-sampling-proxy-oauth\0{servers.url}"
    assert json.loads(text)["tokens"]["access_token"]
    with anyio.fail_after(30):
        async with sdk_host(
            url_command(servers.url), env_for(tmp_path / "state", **keyring_env), tmp_path / "proxy.log"
        ) as client:
            assert tool_text(await client.call_tool("echo", {"text": "keyring"})) == "keyring"
    out = subprocess.run(
        [*PROXY, "logout", "--url", servers.url],
        env=env_for(tmp_path / "state", **keyring_env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "the OS keyring" in out.stdout
    assert json.loads(secrets_file.read_text()) == {}


def test_logout_forgets_the_login(servers: OAuthServers, tmp_path: Path) -> None:
    assert login(servers, tmp_path / "state").returncode == 0
    out = subprocess.run(
        [*PROXY, "logout", "--url", servers.url],
        env=env_for(tmp_path / "state"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and "removed the login" in out.stdout
    assert not list((tmp_path / "state" / "oauth").glob("*.json"))


def test_wrap_says_the_remote_needs_login(servers: OAuthServers, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"servers": {"linear-ish": {"type": "http", "url": servers.url}}}))
    env = env_for(tmp_path / "state")
    out = subprocess.run(
        [*PROXY, "wrap", "--host", "vscode", "--config", str(config), "--all", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"needs an OAuth login: run `mcp-sampling-proxy login --url {servers.url}`" in out.stdout
    assert login(servers, tmp_path / "state").returncode == 0
    out = subprocess.run(
        [*PROXY, "wrap", "--host", "vscode", "--config", str(config), "--all", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "OAuth: logged in" in out.stdout


def test_doctor_shows_each_remotes_login_state(servers: OAuthServers, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".cursor").mkdir(parents=True)
    (home / ".cursor" / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "protected": {"command": "/usr/bin/mcp-sampling-proxy", "args": ["--url", servers.url]},
                    "plain": {"url": "http://127.0.0.1:9/mcp"},
                }
            }
        )
    )
    env = env_for(tmp_path / "state", HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))

    def doctor() -> str:
        out = subprocess.run([*PROXY, "doctor"], env=env, capture_output=True, text=True, timeout=120)
        return out.stdout

    text = doctor()
    login_line = f"✗ protected {servers.url}: needs an OAuth login: run `mcp-sampling-proxy login --url {servers.url}`"
    assert login_line in text
    assert "plain http://127.0.0.1:9/mcp: not logged in (server unreachable" in text
    servers.control("/test/config", {"lifetime": 600})  # valid however slow the machine is
    assert login(servers, tmp_path / "state").returncode == 0
    text = doctor()
    assert f"✓ protected {servers.url}: logged in (file, token valid for" in text, text
    # a token that expires soon, but not before `login` has tried it (1 s did not last that long under load)
    servers.control("/test/config", {"lifetime": 3})
    assert login(servers, tmp_path / "state").returncode == 0
    expired = f"protected {servers.url}: token expired but refreshable"
    deadline = time.monotonic() + 30
    while expired not in (text := doctor()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert expired in text, text


def test_the_login_hints_are_safe_to_paste_into_a_shell() -> None:
    """The scope in a login hint comes from the remote server's WWW-Authenticate header: only an
    RFC 6749 scope is repeated, and the URL and scope are quoted for a shell."""
    import shlex

    from mcp_sampling_proxy.transport.oauth import _SCOPE
    from mcp_sampling_proxy.transport.oauth_store import login_command

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


def test_a_code_sent_to_the_redirect_address_by_someone_else_is_ignored(servers: OAuthServers, tmp_path: Path) -> None:
    """Another program (or a page) that finds the login's loopback port and sends it a code first
    cannot end the login: an answer without this login's state is ignored, the real one is used."""
    done = login(servers, tmp_path / "state", BROWSER_FORGE_FIRST="1")
    assert done.returncode == 0, done.stderr
    assert "ignored a request to the redirect address" in done.stderr
    _, record = stored(tmp_path / "state")
    assert record["tokens"]["access_token"]


def test_the_sdk_still_has_what_the_headless_flow_builds_on() -> None:
    """HeadlessOAuth (transport/oauth.py) overrides the SDK's private `_auth_flow` and calls private
    helpers of OAuthClientProvider and its context. An `mcp` release that renames one would break
    refresh in the field without failing anything else here: this names what to look at."""
    import inspect

    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.oauth2 import OAuthContext

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


def test_doctor_probes_remote_servers_at_the_same_time(tmp_path: Path) -> None:
    """Four remote servers that accept a connection and never answer: each probe waits its 3 s.
    doctor probes them together: their connections are open at the same time (one after another,
    never more than one was, and doctor took 12 s and more)."""
    import select
    import socket

    listeners = []
    for _ in range(4):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        listeners.append(sock)
    most_open = 0
    stop = threading.Event()

    def watch() -> None:  # accept, read and drop nothing, note how many connections are open at once
        nonlocal most_open
        open_conns: list[socket.socket] = []
        while not stop.is_set():
            ready, _, _ = select.select([*listeners, *open_conns], [], [], 0.05)
            for sock in ready:
                if sock in listeners:
                    open_conns.append(sock.accept()[0])
                elif not sock.recv(65536):
                    open_conns.remove(sock)
                    sock.close()
            most_open = max(most_open, len(open_conns))
        for conn in open_conns:
            conn.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    home = tmp_path / "home"
    (home / ".cursor").mkdir(parents=True)
    (home / ".cursor" / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    f"silent-{i}": {"url": f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"}
                    for i, sock in enumerate(listeners)
                }
            }
        )
    )
    env = env_for(tmp_path / "state", HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    try:
        out = subprocess.run([*PROXY, "doctor"], env=env, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        watcher.join(5)
        for sock in listeners:
            sock.close()
    assert all(f"silent-{i} http://127.0.0.1:" in out.stdout for i in range(4)), out.stdout
    assert most_open >= 2, f"at most {most_open} probe connection open at a time: the probes ran one after another"


def refreshing_together(servers: OAuthServers, tmp_path: Path, prepare: Any, work: Any) -> tuple[list[Any], int]:
    """Four proxies of one login: `prepare(hosts)`, then `work(host)` on all four at once while the
    token endpoint answers 1 s late (so their refreshes overlap). (Their answers, refreshes made.)"""
    hosts = [
        RawHost(url_command(servers.url), env_for(tmp_path / "state"), tmp_path / f"proxy{i}.log") for i in range(4)
    ]
    answers: list[Any] = [None] * len(hosts)

    def run(index: int) -> None:
        answers[index] = work(hosts[index])

    try:
        prepare(hosts)
        servers.control("/test/config", {"refresh_delay": 1.0})
        before = servers.control("/test/stats")["refresh_grants"]
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(hosts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        return answers, servers.control("/test/stats")["refresh_grants"] - before
    finally:
        servers.control("/test/config", {"refresh_delay": 0})
        for host in hosts:
            host.close()


def test_proxies_refreshing_one_login_at_once_all_go_on(servers: OAuthServers, tmp_path: Path) -> None:
    """Four hosts start their proxies for one remote at the same moment, after the access token
    expired. The server rotates refresh tokens (each works once): the proxies take turns, the
    first refreshes and the others use what it stored, so every one of them connects."""
    servers.control("/test/config", {"lifetime": 1})
    assert login(servers, tmp_path / "state").returncode == 0
    time.sleep(2.1)
    servers.control("/test/config", {"lifetime": 3600})
    answers, refreshes = refreshing_together(servers, tmp_path, lambda hosts: None, lambda host: host.initialize())
    assert [a.get("result", {}).get("serverInfo", {}).get("name") for a in answers] == ["oauth-protected"] * 4, [
        a.get("error") for a in answers
    ]
    assert refreshes == 1


def test_proxies_refused_a_revoked_token_at_once_take_turns_to_refresh(servers: OAuthServers, tmp_path: Path) -> None:
    """The server revokes the access token four running proxies share (only a 401 tells them; for a
    token without `expires_in` that is the only refresh there is). Each refreshes after its 401 in
    turn with the others, as on expiry: one refresh, and every proxy's call goes through. Refreshing
    at the same moment left all but one with a spent, rotated refresh token."""
    assert login(servers, tmp_path / "state").returncode == 0

    def connected_then_revoked(hosts: list[RawHost]) -> None:
        for host in hosts:
            assert host.initialize()["result"]["serverInfo"]["name"] == "oauth-protected"
        servers.control("/test/revoke-access")

    answers, refreshes = refreshing_together(
        servers,
        tmp_path,
        connected_then_revoked,
        lambda host: host.request("tools/call", {"name": "echo", "arguments": {"text": "through"}}, timeout=60),
    )
    assert [a.get("result", {}).get("content", [{}])[0].get("text") for a in answers] == ["through"] * 4, [
        a.get("error") for a in answers
    ]
    assert refreshes == 1
