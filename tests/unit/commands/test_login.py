"""`login`, `logout`, and the login state `wrap` and `doctor` report, run in process against the OAuth
fixture's authorization server and protected MCP server served from threads (helpers/oauth_servers.py
`AuthServerThread`). The browser is a stand-in for `open_url` that follows the redirect chain as a
browser does; everything after it (the loopback listener, the state check, the token exchange, the
store) is the command's own. Through real processes (the browser hand-off by
MCP_SAMPLING_PROXY_URL_OPENER, the keyring): tests/e2e/test_oauth.py.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.oauth_servers import AuthServerThread, InProcessBrowser
from helpers.support import free_port, run_subcommand

from mcp_sampling_proxy.commands import login as login_module
from mcp_sampling_proxy.doctor.hosts import check_remote_logins
from mcp_sampling_proxy.transport import oauth_store


@pytest.fixture(scope="module")
def servers() -> Iterator[AuthServerThread]:
    found = AuthServerThread(resource_server=True)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> InProcessBrowser:
    found = InProcessBrowser()
    monkeypatch.setattr(login_module, "open_url", found)
    return found


def stored(url: str) -> dict[str, Any]:
    found = oauth_store.load(url)
    assert found is not None
    return found[0]


def test_login_follows_the_browser_back_and_stores_the_tokens(
    servers: AuthServerThread, browser: InProcessBrowser
) -> None:
    before = servers.control("/test/stats")["registrations"]
    done = run_subcommand(["login", "--url", servers.url], check=True)
    assert "logged in to" in done.stdout and "oauth-protected" in done.stdout
    assert (
        browser.visited[0].startswith(f"{servers.issuer}/authorize?")
        and "code_challenge_method=S256" in browser.visited[0]
    )
    assert browser.visited[-1].startswith("http://127.0.0.1:") and "/callback?code=" in browser.visited[-1]
    record = stored(servers.url)
    assert servers.control("/test/stats")["registrations"] == before + 1  # dynamic client registration
    assert record["tokens"]["access_token"] not in done.stdout + done.stderr


def test_a_pre_registered_client_id_is_used_instead_of_registration(
    servers: AuthServerThread, browser: InProcessBrowser, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    servers.control(
        "/test/register",
        {
            "client_id": "pre-registered-proxy",
            "client_secret": "s3cret-value-123",
            "redirect_uris": [f"http://127.0.0.1:{port}/callback"],
        },
    )
    monkeypatch.setenv("TEST_CLIENT_SECRET", "s3cret-value-123")
    before = servers.control("/test/stats")["registrations"]
    run_subcommand(
        [
            "login",
            "--url",
            servers.url,
            "--client-id",
            "pre-registered-proxy",
            "--client-secret-env",
            "TEST_CLIENT_SECRET",
            "--port",
            str(port),
        ],
        check=True,
    )
    assert servers.control("/test/stats")["registrations"] == before
    assert stored(servers.url)["client_info"]["client_id"] == "pre-registered-proxy"
    assert browser.visited[-1].startswith(f"http://127.0.0.1:{port}/callback?code=")


def test_a_code_sent_to_the_redirect_address_by_someone_else_is_ignored(
    servers: AuthServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program (or a page) that finds the login's loopback port and sends it a code first
    cannot end the login: an answer without this login's state is ignored, the real one is used."""
    monkeypatch.setattr(login_module, "open_url", InProcessBrowser(forge_first=True))
    done = run_subcommand(["login", "--url", servers.url], check=True)
    assert "ignored a request to the redirect address" in done.stderr
    assert stored(servers.url)["tokens"]["access_token"]


def test_logout_forgets_the_login(servers: AuthServerThread, browser: InProcessBrowser) -> None:
    run_subcommand(["login", "--url", servers.url], check=True)
    out = run_subcommand(["logout", "--url", servers.url], check=True)
    assert "removed the login" in out.stdout
    assert oauth_store.load(servers.url) is None
    assert not list(oauth_store.file_path(servers.url).parent.glob("*.json"))


def test_wrap_says_the_remote_needs_login(servers: AuthServerThread, browser: InProcessBrowser, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"servers": {"linear-ish": {"type": "http", "url": servers.url}}}))
    wrap = ["wrap", "--host", "vscode", "--config", str(config), "--all", "--dry-run"]
    out = run_subcommand(wrap, check=True)
    assert f"needs an OAuth login: run `mcp-sampling-proxy login --url {servers.url}`" in out.stdout
    run_subcommand(["login", "--url", servers.url], check=True)
    assert "OAuth: logged in" in run_subcommand(wrap, check=True).stdout


def cursor_remotes(servers: dict[str, Any]) -> None:
    """Cursor's user config (under the test's own HOME) with these servers."""
    home = Path.home()
    (home / ".cursor").mkdir(parents=True, exist_ok=True)
    (home / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": servers}))


def doctor_lines() -> list[tuple[str, str]]:
    """`doctor`'s remote servers section: (its mark's status, the line)."""
    return [(check.status, check.text) for check in check_remote_logins().checks]


def test_doctor_shows_each_remotes_login_state(servers: AuthServerThread, browser: InProcessBrowser) -> None:
    url = servers.url
    cursor_remotes(
        {
            "protected": {"command": "/usr/bin/mcp-sampling-proxy", "args": ["--url", url]},
            "plain": {"url": "http://127.0.0.1:9/mcp"},
        }
    )
    lines = doctor_lines()
    assert (
        "fail",
        f"protected {url}: needs an OAuth login: run `mcp-sampling-proxy login --url {url}` once in a terminal",
    ) in lines
    assert any(
        text.startswith("plain http://127.0.0.1:9/mcp: not logged in (server unreachable") for _, text in lines
    ), lines
    run_subcommand(["login", "--url", url], check=True)
    assert any(
        status == "ok" and text.startswith(f"protected {url}: logged in (file, token valid for 59 min")
        for status, text in doctor_lines()
    ), doctor_lines()
    record = stored(url)
    record["expires_at"] = time.time() - 1  # a token minted an hour ago
    oauth_store.save(url, record, "file")
    assert (
        "ok",
        f"protected {url}: token expired but refreshable (file): the proxy refreshes it on its next request",
    ) in (doctor_lines())
    del record["tokens"]["refresh_token"]
    oauth_store.save(url, record, "file")
    expired = (
        "fail",
        f"protected {url}: token expired and cannot be refreshed: run `mcp-sampling-proxy login --url {url}`",
    )
    assert expired in doctor_lines()


def test_doctor_probes_remote_servers_at_the_same_time() -> None:
    """Four remote servers that accept a connection and answer nothing until all four are open: doctor
    probes them together (one after another, each would wait out its 3 s, and never more than one
    connection was open at a time)."""
    listeners = []
    for _ in range(4):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        listeners.append(sock)
    most_open = 0
    stop = threading.Event()

    def watch() -> None:  # accept, read and answer nothing; drop them all once all four are open
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
            if len(open_conns) == len(listeners):
                for conn in open_conns:
                    conn.close()
                open_conns.clear()
        for conn in open_conns:
            conn.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cursor_remotes(
        {f"silent-{i}": {"url": f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"} for i, sock in enumerate(listeners)}
    )
    try:
        lines = doctor_lines()
    finally:
        stop.set()
        watcher.join(5)
        for sock in listeners:
            sock.close()
    assert all(any(text.startswith(f"silent-{i} http://127.0.0.1:") for _, text in lines) for i in range(4)), lines
    assert most_open >= 2, f"at most {most_open} probe connection open at a time: the probes ran one after another"
