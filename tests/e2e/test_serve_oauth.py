"""`serve --oauth-issuer`: the endpoint as an OAuth 2.1 protected resource of an external authorization server.

Real parts only: the authorization server of tests/fixtures/oauth_server.py (the SDK's server auth
pieces, plus RFC 7662 introspection and a JWKS) in a subprocess; `serve` as a process in front of the
small server; the `mcp` SDK's client with its own OAuth support (discovery from the 401,
dynamic registration, PKCE via the scripted browser and a loopback redirect); a loopback
OpenAI-compatible LLM answering the server's sampling; the audit file the proxy writes.
Tokens are checked two ways, both run: introspection (`--oauth-client-file`) and JWTs (the AS's jwks_uri).
What is decided before a session exists (refused tokens, the 401's and the metadata's contents, an
authorization server that cannot answer, OAuth options serve refuses at start) is played in process:
tests/unit/front/test_serve_oauth_played.py;
so are the sessions' cases (rules on the token's identity, a session that is its caller's alone, a TLS
proxy's Host): tests/unit/front/test_serve_oauth_sessions_played.py.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.oauth_servers import BROWSER_SCRIPT, LoopbackRedirect, MemoryTokens, OAuthServers
from helpers.support import (
    PROXY,
    PY,
    SMALL_SERVER,
    free_port,
    openai_policy,
    proxy_env,
    sdk_host,
    tool_json,
    write_policy,
)
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

pytestmark = pytest.mark.anyio

RS_CLIENT, RS_SECRET = "mcp-proxy-rs", "rs-secret-0123456789abcdef"
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
HEADERS = {"Accept": ACCEPT, "Content-Type": "application/json"}
RULES = """\
rules:
  - name: alice
    when: {client: "oauth:alice"}
    action: allow
  - name: everyone-else
    action: deny
    message: sampling is alice's
"""


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    url: str
    audit: Path
    errlog: Path

    def decisions(self) -> list[dict[str, Any]]:
        if not self.audit.exists():
            return []
        return [r for r in map(json.loads, self.audit.read_text().splitlines()) if r.get("event") == "decision"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthServers]:
    found = OAuthServers(tmp_path_factory.mktemp("oauth") / "servers.log")
    try:
        found.register_confidential(RS_CLIENT, RS_SECRET)
        yield found
    finally:
        found.close()


@pytest.fixture(autouse=True)
def _as_defaults(servers: OAuthServers) -> Iterator[None]:
    yield
    servers.control("/test/config", {"lifetime": 3600, "user": "alice", "format": "opaque"})


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


def client_file(directory: Path, secret: str = RS_SECRET, mode: int = 0o600) -> str:
    path = directory / "rs-client"
    path.write_text(f"# introspection credentials\nclient_id = {RS_CLIENT}\nclient_secret: {secret}\n")
    path.chmod(mode)
    return str(path)


def run_serve(tmp_path: Path, *options: str, policy: str | None = None, host: str = "127.0.0.1") -> Serve:
    port = free_port()
    errlog = tmp_path / "serve.log"
    command = [*PROXY, "serve", "--log-format", "json", "--listen", f"{host}:{port}", *options]
    if policy is not None:
        command += ["--policy", policy]
    with open(errlog, "ab") as err:
        process = subprocess.Popen(
            [*command, "--", PY, SMALL_SERVER], env=proxy_env(TEST_LLM_KEY="sk-test"), stderr=err, stdout=err
        )
    deadline = time.monotonic() + 20
    while process.poll() is None and time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return Serve(process, f"http://127.0.0.1:{port}/mcp", tmp_path / "audit.jsonl", errlog)
        time.sleep(0.05)
    raise AssertionError(f"serve did not listen: {errlog.read_text()}")


def auth_options(servers: OAuthServers, tmp_path: Path, mode: str) -> list[str]:
    options = ["--oauth-issuer", servers.issuer, "--oauth-scope", "mcp"]
    return [*options, "--oauth-client-file", client_file(tmp_path)] if mode == "introspection" else options


@asynccontextmanager
async def serving(
    servers: OAuthServers, tmp_path: Path, mode: str, llm: FakeLLMServer | None = None, extra: str = ""
) -> AsyncIterator[Serve]:
    audit = tmp_path / "audit.jsonl"
    base = llm.base_url if llm is not None else "http://127.0.0.1:9/v1"
    policy = write_policy(tmp_path, openai_policy(base, rules=RULES, extra=f"audit:\n  path: {audit}\n{extra}"))
    running = run_serve(tmp_path, *auth_options(servers, tmp_path, mode), policy=policy)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGTERM)
        running.process.wait(15)


async def initialize(url: str, token: str | None) -> httpx2.Response:
    headers = HEADERS if token is None else {**HEADERS, "Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(timeout=15) as http:
        return await http.post(url, json=INITIALIZE, headers=headers)


def wait_for(condition: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    ("mode", "era"),
    [("introspection", "legacy"), ("jwt", "legacy"), ("introspection", "auto")],
    ids=["introspection", "jwt", "introspection-2026-07-28"],
)
async def test_the_sdk_clients_own_oauth_login_samples_and_the_audit_names_the_subject(
    servers: OAuthServers, tmp_path: Path, llm: FakeLLMServer, mode: str, era: Literal["legacy", "auto"]
) -> None:
    """The SDK's Client signs in on its own at the first 401; `auto` speaks 2026-07-28 (no session, a POST
    per request), with the server leg in the handshake era where the small server samples."""
    servers.control("/test/config", {"format": "jwt" if mode == "jwt" else "opaque", "user": "alice"})
    before = servers.control("/test/stats")
    llm.reply_text("hello alice", model="gpt-test")
    browser = LoopbackRedirect()
    tokens = MemoryTokens()
    try:
        async with serving(servers, tmp_path, mode, llm, extra="upstream:\n  era: handshake\n") as served:
            provider = OAuthClientProvider(
                server_url=served.url,
                client_metadata=OAuthClientMetadata(
                    client_name="a desktop MCP client",
                    redirect_uris=[AnyUrl(browser.redirect_uri)],
                    grant_types=["authorization_code", "refresh_token"],
                    response_types=["code"],
                    token_endpoint_auth_method="none",
                ),
                storage=tokens,
                redirect_handler=browser.open,
                callback_handler=browser.code,
            )
            async with (
                httpx2.AsyncClient(auth=provider, timeout=30) as http,
                Client(streamable_http_client(served.url, http_client=http), mode=era) as client,
            ):
                assert client.session.protocol_version == ("2026-07-28" if era == "auto" else "2025-11-25")
                answer = tool_json(await client.call_tool("sample", {"prompt": "who am I?"}))
            assert wait_for(lambda: len(served.decisions()) == 1)
            (record,) = served.decisions()
    finally:
        browser.close()
    assert answer["content"] == {"type": "text", "text": "hello alice"}
    assert "who am I?" in json.dumps(llm.last.body["messages"])
    assert (record["client"], record["rule"], record["decision"]) == ("oauth:alice", "alice", "allow")
    # the client found the authorization server from the 401, registered itself, and logged in with PKCE
    after = servers.control("/test/stats")
    assert after["registrations"] == before["registrations"] + 1
    assert after["code_grants"] == before["code_grants"] + 1
    assert browser.visited[0].startswith(f"{servers.issuer}/authorize?")
    assert "code_challenge_method=S256" in browser.visited[0]
    assert f"resource={served.url.replace(':', '%3A').replace('/', '%2F')}" in browser.visited[0]
    assert tokens.tokens is not None and tokens.tokens.scope == "mcp"
    checked = after["introspections"] - before["introspections"]
    assert checked > 0 if mode == "introspection" else checked == 0  # a JWT is checked against the keys alone


async def test_the_proxys_own_login_and_url_client_sign_in_to_serve(
    servers: OAuthServers, tmp_path: Path, llm: FakeLLMServer
) -> None:
    """`login --url` (the browser step by the scripted browser) and then `--url`, headless, through serve."""
    llm.reply_text("hello again", model="gpt-test")
    state = tmp_path / "client-state"
    env = proxy_env(
        MCP_SAMPLING_PROXY_STATE_DIR=str(state),
        MCP_SAMPLING_PROXY_URL_OPENER=f"{PY} {BROWSER_SCRIPT}",
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
    )
    # its client is another proxy, which offers sampling: serve answers it, not that host
    async with serving(servers, tmp_path, "introspection", llm, extra="sampling:\n  route: proxy\n") as served:
        done = subprocess.run(
            [*PROXY, "login", "--url", served.url], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        async with sdk_host([*PROXY, "--url", served.url], env, tmp_path / "client.log") as client:
            answer = tool_json(await client.call_tool("sample", {"prompt": "and again"}))
        assert wait_for(lambda: len(served.decisions()) == 1)
        (record,) = served.decisions()
    assert answer["content"] == {"type": "text", "text": "hello again"}
    assert (record["client"], record["decision"]) == ("oauth:alice", "allow")


async def test_with_oauth_it_may_listen_beyond_loopback(servers: OAuthServers, tmp_path: Path) -> None:
    resource = "https://mcp.example.test/mcp"  # as a TLS proxy in front of it would publish it
    options = ["--oauth-issuer", servers.issuer, "--oauth-client-file", client_file(tmp_path)]
    served = run_serve(tmp_path, *options, "--oauth-resource", resource, host="0.0.0.0")
    try:
        refused = await initialize(served.url, None)
        accepted = await initialize(served.url, servers.mint(subject="alice", resource=resource))
    finally:
        served.process.send_signal(signal.SIGTERM)
        served.process.wait(15)
    assert refused.status_code == 401
    assert (
        'resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"'
        in (refused.headers["www-authenticate"])
    )
    assert accepted.status_code == 200
    assert "plain http beyond this machine" not in served.errlog.read_text()


def serve_fails(tmp_path: Path, *options: str) -> str:
    done = subprocess.run(
        [*PROXY, "serve", *options, "--", PY, SMALL_SERVER],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_static_tokens_and_oauth_together_are_refused(servers: OAuthServers, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:alice-token-0123456789abcdef\n")
    tokens.chmod(0o600)
    error = serve_fails(tmp_path, "--token-file", str(tokens), "--oauth-issuer", servers.issuer)
    assert "cannot be combined with --token-file" in error
