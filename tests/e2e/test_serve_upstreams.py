"""`serve --url` (an HTTP server behind the endpoint) and `serve --shared-upstream` (one server for every caller).

Real parts only: `serve` as a process with alice's and bob's tokens, the `mcp` SDK's Streamable HTTP client
for each caller, the kitchen-sink server as a command or over Streamable HTTP (tests/fixtures/http_server.py),
a loopback OpenAI-compatible LLM answering the server's sampling, and the audit file the proxy writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.serving import (
    ALICE,
    BOB,
    KITCHEN_SINK_COMMAND,
    HttpMcpServer,
    decisions,
    http_host,
    start_serve,
    stop,
    wait_until,
)
from helpers.support import alive, first_text, openai_policy, server_children, tool_json, write_policy
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    server = HttpMcpServer(tmp_path_factory.mktemp("http") / "server.log")
    try:
        yield server
    finally:
        server.close()


def audited_policy(tmp_path: Path, llm: FakeLLMServer) -> tuple[str, Path]:
    audit = tmp_path / "audit.jsonl"
    return write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {audit}\n")), audit


async def in_thread(condition: Any) -> bool:
    return await anyio.to_thread.run_sync(lambda: wait_until(condition))


async def upstream_session(client: Any) -> str:
    """The Mcp-Session-Id the HTTP server behind serve saw on this client's call."""
    return first_text(await client.call_tool("request_header", {"name": "Mcp-Session-Id"}))


async def modern_tools_list(url: str) -> httpx2.Response:
    """One 2026-07-28 request (no session) as alice."""
    async with httpx2.AsyncClient(timeout=20) as http:
        return await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}},
            headers={
                "Authorization": f"Bearer {ALICE}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/list",
            },
        )


# -- --url ---------------------------------------------------------------------------------------------------


async def test_serve_fronts_an_http_server_and_fulfils_its_sampling(
    tmp_path: Path, llm: FakeLLMServer, http_server: HttpMcpServer
) -> None:
    policy, audit = audited_policy(tmp_path, llm)
    served = start_serve(
        tmp_path,
        "--policy",
        policy,
        "--header",
        "X-Team: ${TEAM}",
        upstream=["--url", http_server.url],
        env={"TEAM": "blue"},
    )
    llm.reply_text("four", model="fake-gpt-4o-mini")
    try:
        async with http_host(served.url, ALICE) as client, http_host(served.url, BOB) as other:
            assert {"echo", "sample", "request_header"} <= {tool.name for tool in (await client.list_tools()).tools}
            assert first_text(await client.call_tool("echo", {"text": "through two hops"})) == "through two hops"
            assert first_text(await client.call_tool("request_header", {"name": "X-Team"})) == "blue"
            answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
            upstream_sessions = {await upstream_session(c) for c in (client, other)}
        stateless = await modern_tools_list(served.url)
        assert server_children(served.process.pid) == []  # nothing was started: the server is at the URL
    finally:
        stop(served)
    assert len(upstream_sessions) == 2  # a session at the server for each client session
    assert stateless.status_code == 200 and "tools" in stateless.json()["result"]  # and for a 2026 caller
    assert answer["content"]["text"] == "four" and answer["model"] == "fake-gpt-4o-mini"
    (record,) = decisions(audit)
    assert record["client"] == "alice" and record["decision"] == "allow"
    assert record["method"] == "sampling/createMessage"


# -- --shared-upstream ---------------------------------------------------------------------------------------


async def test_two_sessions_share_one_server_and_get_their_own_answers(tmp_path: Path) -> None:
    """Both SDK clients number their requests (and progress tokens) alike: the shared server sees them apart,
    and each caller gets its own answers and its own progress."""
    served = start_serve(tmp_path, "--shared-upstream", upstream=KITCHEN_SINK_COMMAND)
    answers: dict[str, list[str]] = {"alice": [], "bob": []}
    progress: dict[str, list[float]] = {"alice": [], "bob": []}
    try:
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:

            async def calls(name: str, client: Any) -> None:
                async def on_progress(done: float, total: float | None, message: str | None) -> None:
                    progress[name].append(done)

                for n in range(5):
                    answers[name].append(first_text(await client.call_tool("echo", {"text": f"{name} {n}"})))
                result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
                answers[name].append(first_text(result))

            async with anyio.create_task_group() as tg:
                tg.start_soon(calls, "alice", alice)
                tg.start_soon(calls, "bob", bob)
            shared = server_children(served.process.pid)
        assert len(shared) == 1  # one server for both
        stateless = await modern_tools_list(served.url)  # a 2026-07-28 caller (no session): the same server
        assert server_children(served.process.pid) == shared  # both sessions ended: it still runs
    finally:
        stop(served)
    for name in ("alice", "bob"):
        assert answers[name] == [f"{name} {n}" for n in range(5)] + ["done 3 steps"]
        assert progress[name] == [1, 2, 3]
    assert stateless.status_code == 200 and stateless.json()["id"] == 7 and "tools" in stateless.json()["result"]
    assert not alive(shared[0])  # stopping serve stopped it


async def test_a_shared_servers_sampling_is_served_for_the_caller_whose_call_asked(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    policy, audit = audited_policy(tmp_path, llm)
    served = start_serve(tmp_path, "--shared-upstream", "--policy", policy, upstream=KITCHEN_SINK_COMMAND)
    try:
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:
            await bob.list_tools()
            for_alice = tool_json(await alice.call_tool("sample", {"prompt": "alice asks"}))
            for_bob = tool_json(await bob.call_tool("sample", {"prompt": "bob asks"}))
            assert len(server_children(served.process.pid)) == 1
    finally:
        stop(served)
    assert for_alice["content"]["text"] == "echo: alice asks"
    assert for_bob["content"]["text"] == "echo: bob asks"
    assert [(r["client"], r["decision"]) for r in decisions(audit)] == [("alice", "allow"), ("bob", "allow")]


async def test_a_shared_servers_request_that_could_be_either_callers_is_refused(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """A command's server does not say which call its sampling belongs to: while alice's call is in flight,
    bob's call's sampling could be either's, so it is refused rather than served (and budgeted, and
    audited) as possibly the wrong caller's. Alice's cancelled call is cancelled at the server."""
    policy, audit = audited_policy(tmp_path, llm)
    served = start_serve(tmp_path, "--shared-upstream", "--policy", policy, upstream=KITCHEN_SINK_COMMAND)

    async def stats(client: Any) -> dict[str, int]:
        return dict(tool_json(await client.call_tool("slow_stats", {})))

    try:
        async with http_host(served.url, BOB) as bob, http_host(served.url, ALICE) as alice:
            async with anyio.create_task_group() as tg:
                tg.start_soon(alice.call_tool, "slow", {"seconds": 60})
                while (await stats(bob))["started"] == 0:
                    await anyio.sleep(0.05)
                refused = tool_json(await bob.call_tool("sample", {"prompt": "whose?"}))
                tg.cancel_scope.cancel()  # the SDK client cancels alice's call
            while (await stats(bob))["cancelled"] == 0:
                await anyio.sleep(0.05)
    finally:
        stop(served)
    assert "--shared-upstream" in refused["error"]["message"]
    assert llm.requests == [] and decisions(audit) == []


async def test_a_2026_caller_shares_the_server_with_sessions_and_its_sampling_is_its_own(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """A 2026-07-28 caller (no session: a lane) reaches the same server as a handshake session, and the
    server's sampling during its call is served (and audited) as that caller's."""
    audit = tmp_path / "audit.jsonl"
    extra = f"upstream:\n  era: handshake\naudit:\n  path: {audit}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=extra))
    served = start_serve(tmp_path, "--shared-upstream", "--policy", policy, upstream=KITCHEN_SINK_COMMAND)
    try:
        async with (
            http_host(served.url, BOB) as bob,
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ALICE}"}, timeout=30) as http,
            Client(streamable_http_client(served.url, http_client=http)) as alice,
        ):
            assert alice.session.protocol_version == "2026-07-28"
            answer = tool_json(await alice.call_tool("sample", {"prompt": "stateless asks"}))
            assert first_text(await bob.call_tool("echo", {"text": "bob too"})) == "bob too"
            assert len(server_children(served.process.pid)) == 1
    finally:
        stop(served)
    assert answer["content"]["text"] == "echo: stateless asks"
    assert [(r["client"], r["decision"]) for r in decisions(audit)] == [("alice", "allow")]


async def test_when_the_shared_server_exits_every_session_hears_it(tmp_path: Path) -> None:
    served = start_serve(tmp_path, "--shared-upstream", upstream=KITCHEN_SINK_COMMAND)
    errors: list[str] = []
    try:
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:
            (first,) = server_children(served.process.pid)

            async def waits() -> None:
                try:
                    await alice.call_tool("slow", {"seconds": 60})
                except Exception as exc:
                    errors.append(str(exc))

            async with anyio.create_task_group() as tg:
                tg.start_soon(waits)
                while tool_json(await bob.call_tool("slow_stats", {}))["started"] == 0:  # bob sees alice's call:
                    await anyio.sleep(0.05)  # no isolation between the callers of a shared server
                with pytest.raises(Exception, match="exited with code 3") as crashed:
                    await bob.call_tool("crash", {"code": 3})
        # the next session gets a new shared server
        async with http_host(served.url, BOB) as again:
            assert first_text(await again.call_tool("echo", {"text": "back"})) == "back"
            second = server_children(served.process.pid)
    finally:
        stop(served)
    assert "upstream server" in str(crashed.value)
    assert len(errors) == 1 and "exited with code 3" in errors[0]
    assert len(second) == 1 and second != [first]


async def test_a_shared_http_upstream_routes_each_sampling_by_the_stream_it_came_on(
    tmp_path: Path, llm: FakeLLMServer, http_server: HttpMcpServer
) -> None:
    """Both callers' calls are in flight when bob's sampling request comes: the upstream's event stream says
    whose it is, so each is served (and audited) as its caller's."""
    policy, audit = audited_policy(tmp_path, llm)
    served = start_serve(tmp_path, "--shared-upstream", "--policy", policy, upstream=["--url", http_server.url])
    llm.reply_text("slow answer", delay=2.0)  # alice's LLM call is still open when bob's sampling comes
    results: dict[str, Any] = {}
    try:
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:

            async def call(name: str, client: Any) -> None:
                results[name] = tool_json(await client.call_tool("sample", {"prompt": f"{name} asks"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "alice", alice)
                assert await in_thread(lambda: len(llm.requests) == 1)
                tg.start_soon(call, "bob", bob)
            upstream_sessions = {await upstream_session(c) for c in (alice, bob)}
    finally:
        stop(served)
    assert results["alice"]["content"]["text"] == "slow answer"
    assert results["bob"]["content"]["text"] == "echo: bob asks"
    assert sorted(r["client"] for r in decisions(audit)) == ["alice", "bob"]
    assert len(upstream_sessions) == 1  # one session at the server for both
