"""`serve --url` (an HTTP server behind the endpoint) and `serve --shared-upstream` (one server for every
caller), played in process (helpers/played_serve.py `played_sessions`): the SDK's real Client for each caller
with alice's and bob's tokens, the kitchen-sink server played in memory behind the multiplexer, or served
over Streamable HTTP from a thread (helpers/serving.py `HttpMcpThread`) for `--url`; a loopback LLM answers
the server's sampling, and the audit file the proxy writes is read back. That one shared server process
serves both sessions, and ends with serve, is tests/e2e/test_serve_upstreams.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.played_serve import PlayedSessions, played_sessions
from helpers.serving import ALICE, BOB, HttpMcpThread, token_file
from helpers.support import first_text, openai_policy, tool_json, write_policy

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("llm_key"),
    # the kitchen-sink fixture samples, deprecated in 2026-07-28, and what serve must still answer
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpMcpThread]:
    server = HttpMcpThread()
    try:
        yield server
    finally:
        server.close()


def audited_policy(tmp_path: Path, llm: FakeLLMServer, extra: str = "") -> str:
    audit = tmp_path / "audit.jsonl"
    return write_policy(tmp_path, openai_policy(llm.base_url, extra=f"{extra}audit:\n  path: {audit}\n"))


async def until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait (in this loop) until `condition()` holds."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


async def upstream_session(client: Any) -> str:
    """The Mcp-Session-Id the HTTP server behind serve saw on this client's call."""
    return first_text(await client.call_tool("request_header", {"name": "Mcp-Session-Id"}))


async def modern_tools_list(served: PlayedSessions) -> httpx2.Response:
    """One 2026-07-28 request (no session) as alice."""
    return await served.http.post(
        served.url,
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
    tmp_path: Path, llm: FakeLLMServer, http_server: HttpMcpThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is started for a session (the unit tier's guard fails a test that starts a process): the
    server is at the URL, with a session there for each client session and one for a 2026 caller."""
    monkeypatch.setenv("TEAM", "blue")
    llm.reply_text("four", model="fake-gpt-4o-mini")
    tokens = token_file(tmp_path)
    policy = audited_policy(tmp_path, llm)
    async with played_sessions(
        "--token-file", tokens, "--header", "X-Team: ${TEAM}", policy=policy, url=http_server.url
    ) as served:
        async with served.client(ALICE) as client, served.client(BOB) as other:
            assert {"echo", "sample", "request_header"} <= {tool.name for tool in (await client.list_tools()).tools}
            assert first_text(await client.call_tool("echo", {"text": "through two hops"})) == "through two hops"
            assert first_text(await client.call_tool("request_header", {"name": "X-Team"})) == "blue"
            answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
            upstream_sessions = {await upstream_session(c) for c in (client, other)}
        stateless = await modern_tools_list(served)
        assert served.servers == []  # none played in memory either: every session went to the URL
        records = served.audit()
    assert len(upstream_sessions) == 2  # a session at the server for each client session
    assert stateless.status_code == 200 and "tools" in stateless.json()["result"]  # and for a 2026 caller
    assert answer["content"]["text"] == "four" and answer["model"] == "fake-gpt-4o-mini"
    (record,) = records
    assert record["client"] == "alice" and record["decision"] == "allow"
    assert record["method"] == "sampling/createMessage"


async def test_a_shared_http_upstream_routes_each_sampling_by_the_stream_it_came_on(
    tmp_path: Path, llm: FakeLLMServer, http_server: HttpMcpThread
) -> None:
    """Both callers' calls are in flight when bob's sampling request comes: the upstream's event stream says
    whose it is, so each is served (and audited) as its caller's."""
    llm.reply_text("slow answer", delay=1.0)  # alice's LLM call is still open when bob's sampling comes
    results: dict[str, Any] = {}
    options = ("--token-file", token_file(tmp_path), "--shared-upstream")
    async with played_sessions(*options, policy=audited_policy(tmp_path, llm), url=http_server.url) as served:
        async with served.client(ALICE) as alice, served.client(BOB) as bob:

            async def call(name: str, client: Any) -> None:
                results[name] = tool_json(await client.call_tool("sample", {"prompt": f"{name} asks"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "alice", alice)
                await until(lambda: len(llm.requests) == 1)
                tg.start_soon(call, "bob", bob)
            upstream_sessions = {await upstream_session(c) for c in (alice, bob)}
        records = served.audit()
    assert results["alice"]["content"]["text"] == "slow answer"
    assert results["bob"]["content"]["text"] == "echo: bob asks"
    assert sorted(r["client"] for r in records) == ["alice", "bob"]
    assert len(upstream_sessions) == 1  # one session at the server for both


# -- --shared-upstream ---------------------------------------------------------------------------------------


async def test_two_sessions_share_one_server_and_get_their_own_answers(tmp_path: Path) -> None:
    """Both SDK clients number their requests (and progress tokens) alike: the shared server sees them apart,
    and each caller gets its own answers and its own progress."""
    answers: dict[str, list[str]] = {"alice": [], "bob": []}
    progress: dict[str, list[float]] = {"alice": [], "bob": []}
    async with played_sessions("--token-file", token_file(tmp_path), "--shared-upstream") as served:
        async with served.client(ALICE) as alice, served.client(BOB) as bob:

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
        (shared,) = served.servers  # one server for both
        stateless = await modern_tools_list(served)  # a 2026-07-28 caller (no session): the same server
        assert served.servers == [shared] and shared.running  # both sessions ended: it still runs
        initializes = [m for m in shared.got if m.get("method") == "initialize"]
    assert not shared.running  # stopping serve stopped it
    assert len(initializes) == 1  # initialized once, for the first session
    for name in ("alice", "bob"):
        assert answers[name] == [f"{name} {n}" for n in range(5)] + ["done 3 steps"]
        assert progress[name] == [1, 2, 3]
    assert stateless.status_code == 200 and stateless.json()["id"] == 7 and "tools" in stateless.json()["result"]


async def test_a_shared_servers_sampling_is_served_for_the_caller_whose_call_asked(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    options = ("--token-file", token_file(tmp_path), "--shared-upstream")
    async with played_sessions(*options, policy=audited_policy(tmp_path, llm)) as served:
        async with served.client(ALICE) as alice, served.client(BOB) as bob:
            await bob.list_tools()
            for_alice = tool_json(await alice.call_tool("sample", {"prompt": "alice asks"}))
            for_bob = tool_json(await bob.call_tool("sample", {"prompt": "bob asks"}))
            assert len(served.servers) == 1
        records = served.audit()
    assert for_alice["content"]["text"] == "echo: alice asks"
    assert for_bob["content"]["text"] == "echo: bob asks"
    assert [(r["client"], r["decision"]) for r in records] == [("alice", "allow"), ("bob", "allow")]


async def test_a_shared_servers_request_that_could_be_either_callers_is_refused(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """A command's server does not say which call its sampling belongs to: while alice's call is in flight,
    bob's call's sampling could be either's, so it is refused rather than served (and budgeted, and
    audited) as possibly the wrong caller's. Alice's cancelled call is cancelled at the server."""
    options = ("--token-file", token_file(tmp_path), "--shared-upstream")
    async with played_sessions(*options, policy=audited_policy(tmp_path, llm)) as served:
        async with served.client(BOB) as bob, served.client(ALICE) as alice:
            (server,) = served.servers
            async with anyio.create_task_group() as tg:
                tg.start_soon(alice.call_tool, "slow", {"seconds": 60})
                await until(lambda: server.slow_stats["started"] == 1)
                refused = tool_json(await bob.call_tool("sample", {"prompt": "whose?"}))
                tg.cancel_scope.cancel()  # the SDK client cancels alice's call
            await until(lambda: server.slow_stats["cancelled"] == 1)
            assert tool_json(await bob.call_tool("slow_stats", {}))["cancelled"] == 1
        records = served.audit()
    assert "--shared-upstream" in refused["error"]["message"]
    assert llm.requests == [] and records == []


async def test_a_2026_caller_shares_the_server_with_sessions_and_its_sampling_is_its_own(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    """A 2026-07-28 caller (no session: a lane) reaches the same server as a handshake session, and the
    server's sampling during its call is served (and audited) as that caller's."""
    policy = audited_policy(tmp_path, llm, extra="upstream:\n  era: handshake\n")
    async with played_sessions("--token-file", token_file(tmp_path), "--shared-upstream", policy=policy) as served:
        async with served.client(BOB) as bob, served.client(ALICE, mode="auto") as alice:
            assert alice.session.protocol_version == "2026-07-28"
            answer = tool_json(await alice.call_tool("sample", {"prompt": "stateless asks"}))
            assert first_text(await bob.call_tool("echo", {"text": "bob too"})) == "bob too"
            assert len(served.servers) == 1
        records = served.audit()
    assert answer["content"]["text"] == "echo: stateless asks"
    assert [(r["client"], r["decision"]) for r in records] == [("alice", "allow")]


async def test_when_the_shared_server_exits_every_session_hears_it(tmp_path: Path) -> None:
    errors: list[str] = []
    async with played_sessions("--token-file", token_file(tmp_path), "--shared-upstream") as served:
        async with served.client(ALICE) as alice, served.client(BOB) as bob:
            (first,) = served.servers

            async def waits() -> None:
                try:
                    await alice.call_tool("slow", {"seconds": 60})
                except Exception as exc:
                    errors.append(str(exc))

            async with anyio.create_task_group() as tg:
                tg.start_soon(waits)
                while tool_json(await bob.call_tool("slow_stats", {}))["started"] == 0:  # bob sees alice's call:
                    await anyio.sleep(0.02)  # no isolation between the callers of a shared server
                with pytest.raises(Exception, match="exited with code 3") as crashed:
                    await bob.call_tool("crash", {"code": 3})
        # the next session gets a new shared server
        async with served.client(BOB) as again:
            assert first_text(await again.call_tool("echo", {"text": "back"})) == "back"
            assert served.running() == [served.servers[1]]
    assert "upstream server" in str(crashed.value)
    assert len(errors) == 1 and "exited with code 3" in errors[0]
    assert len(served.servers) == 2 and first.code == 3
