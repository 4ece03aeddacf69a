"""`serve`: the proxy as a real process serving a stdio server over Streamable HTTP at /mcp.

Real parts only: the `mcp` SDK's Streamable HTTP client (what HTTP hosts are built on) with a
bearer token, the kitchen-sink server behind the proxy, a loopback OpenAI-compatible LLM that
answers the server's sampling, and the audit file the proxy writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.console import PROMPT_RULES, SocketConsole
from helpers.serving import ALICE, BOB, Served, decisions, http_host, start_serve, stop, token_file, wait_until
from helpers.support import (
    KITCHEN_SINK,
    PROXY,
    PY,
    ROOT,
    alive,
    first_text,
    free_port,
    openai_policy,
    proxy_env,
    server_children,
    tool_json,
    write_policy,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


@pytest.fixture
def served(tmp_path: Path, llm: FakeLLMServer) -> Iterator[Served]:
    audit = tmp_path / "audit.jsonl"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=f"audit:\n  path: {audit}\n"))
    running = start_serve(tmp_path, policy=policy)
    yield running
    stop(running)


async def test_a_client_lists_calls_and_samples_through_the_endpoint(served: Served, llm: FakeLLMServer) -> None:
    llm.reply_text("four", model="fake-gpt-4o-mini")
    async with http_host(served.url, ALICE) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "sample"} <= names
        assert first_text(await client.call_tool("echo", {"text": "over http"})) == "over http"
        answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
    assert answer["content"]["text"] == "four"
    assert answer["model"] == "fake-gpt-4o-mini"
    assert "2+2?" in json.dumps(llm.last.body["messages"][-1])
    assert wait_until(lambda: len(decisions(served.audit)) == 1)
    (record,) = decisions(served.audit)
    assert record["client"] == "alice"
    assert record["decision"] == "allow"
    assert record["method"] == "sampling/createMessage"


async def test_progress_reaches_the_client_on_its_calls_stream(served: Served) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with http_host(served.url, ALICE) as client:
        result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert first_text(result) == "done 3 steps"
    assert seen == [1, 2, 3]


async def test_two_clients_get_two_separate_servers(served: Served) -> None:
    async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:
        await alice.call_tool("echo", {"text": "a"})
        await bob.call_tool("echo", {"text": "b"})
        assert len(server_children(served.process.pid)) == 2  # a server process each
    assert wait_until(lambda: server_children(served.process.pid) == [])  # DELETE at the end ends each server


async def test_another_clients_session_id_is_not_found(served: Served) -> None:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    async with httpx2.AsyncClient(timeout=10) as http:
        opened = await http.post(served.url, json=INITIALIZE, headers={**headers, "Authorization": f"Bearer {ALICE}"})
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        as_bob = {**headers, "Authorization": f"Bearer {BOB}", "Mcp-Session-Id": session}
        stolen = await http.post(served.url, json=listing, headers=as_bob)
    assert opened.status_code == 200
    assert stolen.status_code == 404
    assert stolen.json()["error"]["message"] == "Not Found: no such session (it ended, or expired): initialize again"


@pytest.mark.parametrize("approve", [True, False])
async def test_an_approval_is_asked_in_the_http_hosts_own_ui(tmp_path: Path, llm: FakeLLMServer, approve: bool) -> None:
    """`action: prompt` with the host channel: the approval form reaches the HTTP client on the stream of
    the tool call it belongs to, and its answer decides."""
    audit = tmp_path / "audit.jsonl"
    rules = "rules:\n  - name: ask\n    action: prompt\napproval:\n  channels: [host]\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules, extra=f"audit:\n  path: {audit}\n"))
    served = start_serve(tmp_path, policy=policy)
    asked: list[str] = []

    async def approver(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": approve})

    llm.reply_text("approved answer")
    try:
        async with http_host(served.url, BOB, elicitation_callback=approver) as client:
            result = await client.call_tool("sample", {"prompt": "may I?"})
    finally:
        stop(served)
    assert len(asked) == 1 and "asks to use an LLM" in asked[0]
    (record,) = decisions(audit)
    assert record["client"] == "bob"
    if approve:
        assert tool_json(result)["content"]["text"] == "approved answer"
        assert record["decision"] == "approved" and record["approver"] == "host"
    else:
        assert "error" in tool_json(result)
        assert record["decision"] == "rejected"
        assert llm.requests == []


async def test_a_tool_rule_holds_over_http_and_names_the_client(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    rules = "tools:\n  rules:\n    - name: no-echo\n      tool: echo\n      action: deny\n      message: not today\n"
    policy = write_policy(tmp_path, f"audit:\n  path: {audit}\n{rules}")
    served = start_serve(tmp_path, policy=policy)
    try:
        async with http_host(served.url, ALICE) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            with pytest.raises(MCPError, match="tools rule 'no-echo': not today"):
                await client.call_tool("echo", {"text": "x"})
    finally:
        stop(served)
    assert "echo" not in names and "sample" in names
    records = decisions(audit)
    assert records and all(record["client"] == "alice" for record in records)
    assert {record["decision"] for record in records} == {"deny"}


async def test_a_served_request_is_approved_at_the_companion_console(tmp_path: Path, llm: FakeLLMServer) -> None:
    """No terminal is assumed: with the console channel, the question reaches `console` on serve's socket."""
    audit = tmp_path / "audit.jsonl"
    rules = f"{PROMPT_RULES}approval:\n  channels: [terminal, console]\naudit:\n  path: {audit}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, rules=rules))
    run_dir = tmp_path / "run"
    served = start_serve(
        tmp_path,
        policy=policy,
        env={"MCP_SAMPLING_PROXY_RUNTIME_DIR": str(run_dir)},
    )
    llm.reply_text("console-approved")
    results: list[Any] = []
    try:
        console = await SocketConsole.attach(run_dir)
        async with http_host(served.url, ALICE) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                results.append(tool_json(await client.call_tool("sample", {"prompt": "ask a person"})))

            tg.start_soon(call)
            pending = await console.receive()
            assert pending["type"] == "pending"
            await console.send({"type": "decision", "id": pending["id"], "approve": True})
    finally:
        stop(served)
    assert results[0]["content"]["text"] == "console-approved"
    (record,) = decisions(audit)
    assert record["decision"] == "approved" and record["approver"] == "console" and record["client"] == "alice"


async def test_a_server_that_exits_ends_its_session_only(served: Served) -> None:
    async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:
        crashed = server_children(served.process.pid)
        with pytest.raises(Exception, match="exited with code 3"):
            await alice.call_tool("crash", {"code": 3})
        assert wait_until(lambda: len(server_children(served.process.pid)) == 1)
        assert first_text(await bob.call_tool("echo", {"text": "still here"})) == "still here"
        assert len(crashed) == 2
    assert "exited with code 3" in served.errlog.read_text()


async def test_past_the_session_cap_a_new_session_gets_503(tmp_path: Path) -> None:
    served = start_serve(tmp_path, "--max-sessions", "1")
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {ALICE}"}
    try:
        async with httpx2.AsyncClient(timeout=10) as http:
            first = await http.post(served.url, json=INITIALIZE, headers=headers)
            second = await http.post(served.url, json=INITIALIZE, headers=headers)
            await http.delete(served.url, headers={**headers, "Mcp-Session-Id": first.headers["mcp-session-id"]})
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not server_children(served.process.pid)))
            third = await http.post(served.url, json=INITIALIZE, headers=headers)
    finally:
        stop(served)
    assert first.status_code == 200 and third.status_code == 200
    assert second.status_code == 503
    assert "--max-sessions" in second.json()["error"]["message"]


# -- the 2026-07-28 era: stateless requests, a server per caller ------------------------------------------

MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern_request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": MODERN_META}}


def modern_headers(token: str, method: str) -> dict[str, str]:
    return {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }


async def test_a_2026_client_is_served_statelessly_with_sampling(tmp_path: Path, llm: FakeLLMServer) -> None:
    """The SDK's Client in its default mode probes 2026-07-28 first and stays there: each request is a POST
    of its own, answered in its body. The server leg is pinned to the handshake era, where the server
    samples with a request the proxy answers (its LLM, the audit naming the caller)."""
    audit = tmp_path / "audit.jsonl"
    extra = f"upstream:\n  era: handshake\naudit:\n  path: {audit}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, extra=extra))
    served = start_serve(tmp_path, policy=policy)
    llm.reply_text("stateless four")
    try:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ALICE}"}, timeout=30) as http,
            Client(streamable_http_client(served.url, http_client=http)) as client,
        ):
            assert client.session.protocol_version == MODERN
            assert "sample" in {tool.name for tool in (await client.list_tools()).tools}
            assert first_text(await client.call_tool("echo", {"text": "no session"})) == "no session"
            answer = tool_json(await client.call_tool("sample", {"prompt": "2+2?"}))
            assert len(server_children(served.process.pid)) == 1
    finally:
        stop(served)
    assert answer["content"]["text"] == "stateless four"
    (record,) = decisions(audit)
    assert record["client"] == "alice" and record["decision"] == "allow"


@pytest.mark.parametrize("era", ["handshake", "auto"], ids=["handshake-server", "2026-server"])
async def test_a_2026_call_streams_its_progress_and_log_messages(tmp_path: Path, era: str) -> None:
    """A 2026-07-28 caller that accepts a stream gets a call's progress and log messages as the server sends
    them, then the answer (they used to be dropped: the answer came as plain JSON); a call with nothing to
    stream is still answered as JSON. The same whether the server speaks 2026-07-28 or the handshake era."""
    policy = write_policy(tmp_path, f"upstream:\n  era: {era}\n")
    served = start_serve(tmp_path, policy=policy)
    steps: list[tuple[float, float | None, str | None]] = []
    logged: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append((progress, total, message))

    async def on_log(params: Any) -> None:
        logged.append(str(params.data))

    try:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ALICE}"}, timeout=30) as http,
            Client(
                streamable_http_client(served.url, http_client=http), logging_callback=on_log, log_level="info"
            ) as client,
        ):
            assert client.session.protocol_version == MODERN
            done = first_text(await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))
            said = first_text(await client.call_tool("log", {"message": "written down"}))
            plain = await http.post(
                served.url,
                json=modern_request(9, "tools/call", {"name": "echo", "arguments": {"text": "no stream"}}),
                headers=modern_headers(ALICE, "tools/call"),
            )
    finally:
        stop(served)
    assert done.startswith("done 3 steps") and said
    assert [p[:2] for p in steps] == [(1, 3), (2, 3), (3, 3)]
    assert "written down" in logged
    assert plain.headers["content-type"].startswith("application/json")  # nothing to stream: JSON, as before
    assert plain.json()["result"]["content"][0]["text"] == "no stream"


async def test_2026_callers_get_a_server_each_and_an_idle_one_ends(tmp_path: Path) -> None:
    served = start_serve(tmp_path, "--idle-timeout", "2s")
    listing = modern_request(7, "tools/list")
    try:
        async with httpx2.AsyncClient(timeout=20) as http:
            answers = [
                await http.post(served.url, json=listing, headers=modern_headers(token, "tools/list"))
                for token in (ALICE, ALICE, BOB)
            ]
            servers = server_children(served.process.pid)
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not any(map(alive, servers))))
    finally:
        stop(served)
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert all(answer.json()["id"] == 7 and "tools" in answer.json()["result"] for answer in answers)
    assert len(servers) == 2  # alice's two requests share her server; bob has his own
    assert served.errlog.read_text().count("idle for 2 s") == 2


async def test_a_2026_callers_server_that_exits_is_replaced_at_the_next_request(tmp_path: Path) -> None:
    served = start_serve(tmp_path)
    crash = modern_request(1, "tools/call", {"name": "crash", "arguments": {"code": 3}})
    try:
        async with httpx2.AsyncClient(timeout=20) as http:
            listing = modern_request(0, "tools/list")
            await http.post(served.url, json=listing, headers=modern_headers(ALICE, "tools/list"))
            first = server_children(served.process.pid)
            crashed = await http.post(served.url, json=crash, headers=modern_headers(ALICE, "tools/call"))
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not any(map(alive, first))))
            again = await http.post(
                served.url, json=modern_request(2, "tools/list"), headers=modern_headers(ALICE, "tools/list")
            )
            second = server_children(served.process.pid)
    finally:
        stop(served)
    assert crashed.status_code == 200
    assert "exited with code 3" in crashed.json()["error"]["message"]
    assert again.status_code == 200 and "tools" in again.json()["result"]
    assert len(first) == 1 and len(second) == 1 and second != first


def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--listen", f"0.0.0.0:{free_port()}", "--", PY, KITCHEN_SINK],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--token-file" in done.stderr and "127.0.0.1" in done.stderr


def test_a_server_command_that_cannot_run_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--listen", f"127.0.0.1:{free_port()}", "--", "no-such-mcp-server-here"],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "'no-such-mcp-server-here' not found on PATH" in done.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    tokens = token_file(tmp_path)
    os.chmod(tokens, 0o644)
    done = subprocess.run(
        [*PROXY, "serve", "--token-file", tokens, "--", PY, KITCHEN_SINK],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert f"chmod 600 {tokens}" in done.stderr


async def test_an_idle_session_ends_with_its_server(tmp_path: Path) -> None:
    served = start_serve(tmp_path, "--idle-timeout", "1s")
    try:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {ALICE}"}
        async with httpx2.AsyncClient(timeout=10) as http:
            opened = await http.post(served.url, json=INITIALIZE, headers=headers)
            assert opened.status_code == 200
            (server,) = server_children(served.process.pid)
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not alive(server)))
            later = await http.post(
                served.url,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]},
            )
        assert later.status_code == 404
        assert "idle" in served.errlog.read_text()
    finally:
        stop(served)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
async def test_ending_serve_ends_every_server(tmp_path: Path, how: signal.Signals) -> None:
    served = start_serve(tmp_path)
    servers: list[int] = []
    with suppress(Exception):  # the clients see the endpoint go as they close: what matters is what is left
        async with http_host(served.url, ALICE) as alice, http_host(served.url, BOB) as bob:
            await alice.list_tools()
            await bob.list_tools()
            servers = server_children(served.process.pid)
            served.process.send_signal(how)
            await anyio.to_thread.run_sync(lambda: served.process.wait(15))
    assert len(servers) == 2
    assert served.process.returncode == (0 if how == signal.SIGTERM else -signal.SIGKILL)
    assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not any(map(alive, servers))))


async def test_a_listen_the_server_does_not_have_is_a_404_as_directly(tmp_path: Path) -> None:
    """A 2026-07-28 server without subscriptions/listen answers it -32601; directly that is an HTTP 404 with
    the error. Through serve it was a 200 SSE stream holding the error; now the same 404 and JSON."""
    modern = str(ROOT / "tests" / "fixtures" / "modern_raw_server.py")
    served = start_serve(tmp_path, upstream=["--", PY, modern])
    listen = modern_request(0, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    try:
        async with httpx2.AsyncClient(timeout=20) as http:
            answer = await http.post(served.url, json=listen, headers=modern_headers(ALICE, "subscriptions/listen"))
    finally:
        stop(served)
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"]["code"] == -32601 and answer.json()["id"] == 0


async def test_a_2026_callers_subscriptions_listen_is_an_event_stream(tmp_path: Path) -> None:
    """subscriptions/listen is answered with an SSE stream: the acknowledgement first, then the server's
    notifications the filter asked for, tagged with the caller's own request id. The server leg is pinned
    to the handshake era, where the proxy serves the subscription from the server's notifications. Closing
    the stream ends the subscription, and the caller's server ends when idle as if it had never listened."""
    policy = write_policy(tmp_path, "upstream:\n  era: handshake\n")
    served = start_serve(tmp_path, "--idle-timeout", "2s", policy=policy)
    listen = modern_request(0, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    listen["id"] = "listen-1"
    notify = modern_request(1, "tools/call", {"name": "notify_changes", "arguments": {}})
    events: list[dict[str, Any]] = []
    try:
        async with httpx2.AsyncClient(timeout=20) as http:
            headers = modern_headers(ALICE, "subscriptions/listen")
            async with http.stream("POST", served.url, json=listen, headers=headers) as stream:
                content_type = stream.headers["content-type"]
                data = (json.loads(line[6:]) async for line in stream.aiter_lines() if line.startswith("data: "))
                events.append(await anext(data))  # acknowledged: now the server announces its changes
                called = await http.post(served.url, json=notify, headers=modern_headers(ALICE, "tools/call"))
                events.append(await anext(data))
                servers = server_children(served.process.pid)
            assert await anyio.to_thread.run_sync(lambda: wait_until(lambda: not any(map(alive, servers))))
    finally:
        stop(served)
    assert called.json()["result"]["content"][0]["text"] == "notified"
    assert content_type.startswith("text/event-stream")
    acknowledged, changed = events
    assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
    assert acknowledged["params"]["notifications"] == {"toolsListChanged": True}
    assert acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    # the prompts' and resources' list changes came too, but this subscription did not ask for them
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    assert served.errlog.read_text().count("idle for 2 s") == 1


async def test_a_method_the_2026_callers_server_does_not_have_gets_404(tmp_path: Path) -> None:
    served = start_serve(tmp_path)
    try:
        async with httpx2.AsyncClient(timeout=20) as http:
            unknown = modern_request(3, "tools/frobnicate")
            answer = await http.post(served.url, json=unknown, headers=modern_headers(ALICE, "tools/frobnicate"))
    finally:
        stop(served)
    assert answer.status_code == 404
    assert answer.json()["id"] == 3 and answer.json()["error"]["code"] == -32601
