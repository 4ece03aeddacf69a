"""`serve --oauth-issuer`'s sessions played in process (helpers/played_serve.py `played_sessions`): the
fixture's authorization server in a thread (helpers/oauth_servers.py `AuthServerThread`), tokens it mints
for this resource, the SDK's real Client sampling through the kitchen-sink server played in memory, a
loopback LLM and the audit file. Who a token names is who the rules and the audit see, a session is its
caller's alone, and a TLS proxy's public Host is let in. The SDK client's own login and the proxy's own
`login` through a real serve are tests/e2e/test_serve_oauth.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.oauth_servers import AuthServerThread
from helpers.played_serve import ACCEPT, INITIALIZE, NO_SUCH_SESSION, PlayedSessions, played_sessions
from helpers.support import openai_policy, tool_json, write_policy

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("llm_key")]

RS_CLIENT, RS_SECRET = "mcp-proxy-rs", "rs-secret-0123456789abcdef"
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


@pytest.fixture(scope="module")
def servers() -> Iterator[AuthServerThread]:
    found = AuthServerThread()
    try:
        found.register_confidential(RS_CLIENT, RS_SECRET)
        yield found
    finally:
        found.close()


def client_file(directory: Path) -> str:
    path = directory / "rs-client"
    path.write_text(f"# introspection credentials\nclient_id = {RS_CLIENT}\nclient_secret: {RS_SECRET}\n")
    path.chmod(0o600)
    return str(path)


def introspected(servers: AuthServerThread, tmp_path: Path, *more: str) -> list[str]:
    return ["--oauth-issuer", servers.issuer, "--oauth-client-file", client_file(tmp_path), *more]


def policy(tmp_path: Path, llm_url: str = "http://127.0.0.1:9/v1") -> str:
    audit = tmp_path / "audit.jsonl"
    return write_policy(tmp_path, openai_policy(llm_url, rules=RULES, extra=f"audit:\n  path: {audit}\n"))


async def sample_with(served: PlayedSessions, token: str, prompt: str) -> dict[str, Any]:
    """The kitchen-sink server's `sample` tool, called with a bearer token (the SDK's Client)."""
    async with served.client(token) as client:
        answer: dict[str, Any] = tool_json(await client.call_tool("sample", {"prompt": prompt}))
        return answer


async def test_client_rules_match_the_oauth_identity(
    servers: AuthServerThread, tmp_path: Path, llm: FakeLLMServer
) -> None:
    llm.reply_text("hello alice", model="gpt-test")
    async with played_sessions(*introspected(servers, tmp_path), policy=policy(tmp_path, llm.base_url)) as served:
        alice = servers.mint(subject="alice", resource=served.url)
        bob = servers.mint(subject="bob", resource=served.url)
        robot = servers.mint(client_id="nightly-job", resource=served.url)  # client credentials: no subject
        alices = await sample_with(served, alice, "from alice")
        bobs = await sample_with(served, bob, "from bob")
        robots = await sample_with(served, robot, "from the job")
        records = served.audit()
    assert alices["content"] == {"type": "text", "text": "hello alice"}
    assert bobs["error"]["message"] == robots["error"]["message"] == "sampling is alice's"
    assert len(llm.requests) == 1 and "from alice" in json.dumps(llm.requests[0].body["messages"])
    assert [(r["client"], r["rule"], r["decision"]) for r in records] == [
        ("oauth:alice", "alice", "allow"),
        ("oauth:bob", "everyone-else", "deny"),
        ("oauth-client:nightly-job", "everyone-else", "deny"),
    ]


async def test_one_callers_session_is_not_anothers(servers: AuthServerThread, tmp_path: Path) -> None:
    async with played_sessions(*introspected(servers, tmp_path), policy=policy(tmp_path)) as served:
        alice = servers.mint(subject="alice", resource=served.url)
        bob = servers.mint(subject="bob", resource=served.url)
        opened = await served.initialize(alice)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        headers = {**HEADERS, "Authorization": f"Bearer {bob}", "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        as_bob = await served.http.post(served.url, json=listing, headers=headers)
        got = [message["method"] for message in served.servers[0].got]
    assert opened.status_code == 200
    assert as_bob.status_code == 404 and as_bob.json()["error"]["message"] == NO_SUCH_SESSION
    assert got == ["initialize"]  # bob's request never reached alice's server


async def test_behind_a_tls_proxy_on_this_machine_the_resources_host_is_let_in(
    servers: AuthServerThread, tmp_path: Path
) -> None:
    """A TLS proxy on this machine in front of a loopback serve passes the public Host on; the DNS-rebinding
    check lets that one in (it is the resource's) and still refuses any other."""
    resource = "https://mcp.example.test/mcp"
    options = introspected(servers, tmp_path, "--oauth-resource", resource)
    token = servers.mint(subject="alice", resource=resource)
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    async with played_sessions(*options, policy=policy(tmp_path)) as served:
        proxied = await served.http.post(served.url, json=INITIALIZE, headers={**headers, "Host": "mcp.example.test"})
        rebound = await served.http.post(served.url, json=INITIALIZE, headers={**headers, "Host": "evil.test"})
        started = len(served.servers)
    assert proxied.status_code == 200
    assert rebound.status_code == 421
    assert started == 1  # the rebound request started nothing
