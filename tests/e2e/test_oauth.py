"""OAuth for `--url` upstreams, end to end: `login` from a "terminal", then the real proxy process headless.

An authorization server and an OAuth-protected MCP server run on loopback ports in a subprocess
(tests/fixtures/oauth_server.py, built from the SDK's server auth pieces). The browser step is
tests/fixtures/browser.py, a script that follows the authorization URL's redirect chain
(/authorize -> /consent -> the login's 127.0.0.1 redirect) the way a browser would; `login` runs it
through MCP_SAMPLING_PROXY_URL_OPENER, as it would open the user's browser.

What needs a process is here: the browser hand-off, the proxy and `serve` using the stored login, the
keyring of a real process, proxies of one login refreshing at once. What the proxy decides (refresh,
the errors naming `login`, the refresh turn) and what `login`, `logout`, `wrap` and `doctor` say is
tested in process: tests/unit/transport/test_oauth_headless.py, tests/unit/commands/test_login.py.
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
async def test_login_stores_tokens_0600_and_the_proxy_and_serve_call_tools_with_them(
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

    # `serve --url` uses the same login: each client session's upstream session carries its token
    served = start_serve(tmp_path, upstream=["--url", servers.url], env=env_for(tmp_path / "state"))
    try:
        async with http_host(served.url, ALICE) as client:
            assert tool_text(await client.call_tool("whoami", {})) == record["client_info"]["client_id"]
    finally:
        stop(served)
    assert token not in served.errlog.read_text()


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


def test_proxies_refreshing_one_login_at_once_all_go_on(servers: OAuthServers, tmp_path: Path) -> None:
    """Two hosts start their proxies for one remote at the same moment, after the access token
    expired, while the token endpoint answers 1 s late (so their refreshes overlap). The server
    rotates refresh tokens (each works once): the proxies take turns, the first refreshes and the
    other uses what it stored, so both connect."""
    assert login(servers, tmp_path / "state").returncode == 0
    path, record = stored(tmp_path / "state")
    record["expires_at"] = time.time() - 1  # as a token minted an hour ago, without the wait
    path.write_text(json.dumps(record))
    hosts = [
        RawHost(url_command(servers.url), env_for(tmp_path / "state"), tmp_path / f"proxy{i}.log") for i in range(2)
    ]
    answers: list[dict[str, Any]] = [{}] * len(hosts)

    def start(index: int) -> None:
        answers[index] = hosts[index].initialize()

    try:
        servers.control("/test/config", {"refresh_delay": 1.0})
        before = servers.control("/test/stats")["refresh_grants"]
        threads = [threading.Thread(target=start, args=(i,)) for i in range(len(hosts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        refreshes = servers.control("/test/stats")["refresh_grants"] - before
    finally:
        servers.control("/test/config", {"refresh_delay": 0})
        for host in hosts:
            host.close()
    assert [a.get("result", {}).get("serverInfo", {}).get("name") for a in answers] == ["oauth-protected"] * 2, [
        a.get("error") for a in answers
    ]
    assert refreshes == 1
